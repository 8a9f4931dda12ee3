//! The main loop each worker host runs: the Messenger worker around the system's roles.

use std::rc::Rc;

use crate::sim::cx::Cx;
use crate::sim::history::QueueRole;
use crate::sut::System;

/// The kind of a worker, from its name's first letters: `p` producer, `c` consumer,
/// `r` relay, `d` downstream, `ret` retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Dispatches the scenario's events.
    Producer,
    /// Consumes the payments queue.
    Consumer,
    /// Publishes the outbox.
    Relay,
    /// Consumes the payouts queue.
    Downstream,
    /// Purges old dedup rows, one run per step.
    Retention,
}

impl Role {
    /// The role of a worker name: `p`, `c1`, `r1`, `d1`, `ret`.
    pub fn of(name: &str) -> Option<Role> {
        if name == "ret" {
            return Some(Role::Retention);
        }
        let (head, tail) = name.split_at(name.find(|c: char| c.is_ascii_digit()).unwrap_or(name.len()));
        if !tail.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        match head {
            "p" => Some(Role::Producer),
            "c" => Some(Role::Consumer),
            "r" => Some(Role::Relay),
            "d" => Some(Role::Downstream),
            _ => None,
        }
    }
}

/// Runs `role`'s loop until the host is crashed or the simulation ends (a producer with
/// nothing left to dispatch waits for work).
/// Service errors are noted in the trace and the loop goes on, as a Messenger worker does.
pub async fn run(role: Role, mut cx: Cx, system: Rc<dyn System>) {
    match role {
        Role::Producer => {
            let producer = system.producer();
            loop {
                let next = cx_world_front(&cx);
                match next {
                    Some(ev) => {
                        cx.idle(false);
                        // A failed dispatch stays at the front: the caller retries it.
                        match producer.dispatch(&mut cx, &ev).await {
                            Ok(()) => pop_front(&cx),
                            Err(e) => cx.note(format!("dispatch failed, will retry: {e}")),
                        }
                    }
                    None => cx.wait_for_work().await,
                }
            }
        }
        Role::Consumer => serve(&mut cx, QueueRole::Payments, Handler::Payout(system.consumer())).await,
        Role::Downstream => serve(&mut cx, QueueRole::Payouts, Handler::Downstream(system.downstream())).await,
        Role::Relay => {
            let relay = system.relay();
            loop {
                if let Err(e) = relay.run_once(&mut cx).await {
                    cx.note(format!("relay cycle failed: {e}"));
                    let _ = cx.rollback().await;
                }
            }
        }
        Role::Retention => {
            let retention = system.retention();
            loop {
                if let Err(e) = retention.run_once(&mut cx).await {
                    cx.note(format!("retention failed: {e}"));
                }
            }
        }
    }
}

/// The handler of a queue-consuming worker.
enum Handler {
    Payout(Rc<dyn crate::sut::Consumer>),
    Downstream(Rc<dyn crate::sut::Downstream>),
}

/// The Messenger worker loop of a consumer: receive, handle, and on a service error note it
/// and roll back; forever.
async fn serve(cx: &mut Cx, queue: QueueRole, handler: Handler) {
    loop {
        match cx.receive(queue).await {
            Ok(Some(d)) => {
                let handled = match &handler {
                    Handler::Payout(h) => h.on_delivery(cx, d).await,
                    Handler::Downstream(h) => h.on_delivery(cx, d).await,
                };
                if let Err(e) = handled {
                    cx.note(format!("error: {e}"));
                    let _ = cx.rollback().await;
                }
            }
            Ok(None) => {}
            Err(e) => cx.note(format!("receive failed: {e}")),
        }
    }
}

fn cx_world_front(cx: &Cx) -> Option<crate::sut::messages::PaymentCaptured> {
    cx.world().borrow().to_dispatch.front().cloned()
}

fn pop_front(cx: &Cx) {
    cx.world().borrow_mut().to_dispatch.pop_front();
}
