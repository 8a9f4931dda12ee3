//! The yield point every worker call waits at, in-process ([`crate::sim::cx::Cx`]) or at the
//! wire ([`crate::sim::wire`]): the worker parks in its [`Mailbox`](super::world::Mailbox) until the
//! scheduler grants the call.

use super::world::{SharedWorld, Status};
use crate::spec::CrashPoint;

/// Parks worker `me` before call `op`, standing at crash point `at`, until the scheduler
/// grants it (status [`Status::Parked`], then [`Status::Running`]). Returns the crash point of
/// a failure the schedule armed there (`fail@point`): the caller then does not make the call.
pub async fn park(world: &SharedWorld, me: &str, op: &'static str, at: Option<CrashPoint>) -> Option<CrashPoint> {
    let notify = {
        let mut w = world.borrow_mut();
        let slot = w.mailbox(me);
        slot.status = Status::Parked { op, at };
        slot.notify.clone()
    };
    loop {
        {
            let mut w = world.borrow_mut();
            let slot = w.mailbox(me);
            if slot.granted {
                slot.granted = false;
                slot.at_cycle_start = false;
                slot.status = Status::Running { op, at };
                break;
            }
        }
        notify.notified().await;
    }
    let mut w = world.borrow_mut();
    w.mailbox(me).take_armed_failure(at)
}
