//! The system under test as the engine sees it: programs behind traits, one per role kind.
//!
//! A [`System`] (a workload's reference or one of its mutants) hands out a [`Program`] for
//! each role the workload declares. Every program reaches the services only through
//! [`Cx`], so every call is a yield point for the scheduler. A program runs on its worker's
//! turmoil host, whose tokio runtime has no I/O driver unless an external worker shares the
//! fleet (`sim/fleet.rs`): a tokio socket a program opens itself
//! (outside [`Cx`] and the simulated network to the workload's providers) panics with tokio's
//! "IO is disabled", which ends the run as a harness error naming the worker.

use std::borrow::Cow;
use std::rc::Rc;

use async_trait::async_trait;

use super::{CallError, Cx, Delivery};
use crate::spec::Event;

/// Publishes the scenario's events (the payout article: `$bus->dispatch($message, [...stamps])`).
#[async_trait(?Send)]
pub trait Producer {
    /// Dispatches one event. `Ok` removes it from the producer's queue of events to dispatch;
    /// an error leaves it at the front, to be dispatched again. A crash drops the future.
    async fn dispatch(&self, cx: &mut Cx, event: &Event) -> Result<(), CallError>;
}

/// The simplest producer: SendMessage of each event's body to `queue` (a yield point named
/// `send`), then the worker stands at crash point `after_send`. It takes no dispatch lock, so a
/// crash after the send sends the event again: a duplicate the consumers must absorb.
pub struct SendEach {
    /// The queue's name ([`crate::spec::QueueSpec::name`]).
    pub queue: &'static str,
    /// The crash point after the send, as the workload declares it for its producer role.
    pub after_send: crate::spec::CrashPoint,
}

#[async_trait(?Send)]
impl Producer for SendEach {
    async fn dispatch(&self, cx: &mut Cx, event: &Event) -> Result<(), CallError> {
        cx.send("send", self.queue, &event.body, event.identity).await?;
        cx.crash_point(self.after_send);
        Ok(())
    }
}

/// Handles one delivery of its queue, including its acknowledgement (DeleteMessage), retry
/// (ChangeMessageVisibility) or parking in a failure transport.
#[async_trait(?Send)]
pub trait Handler {
    /// Handles `delivery`. An error is noted in the trace and the open transaction rolled back,
    /// as Messenger's worker does; the message then comes back when its visibility times out.
    async fn on_delivery(&self, cx: &mut Cx, delivery: Delivery) -> Result<(), CallError>;

    /// `MaxNumberOfMessages` of this handler's ReceiveMessage, 1 to 10 (ReceiveMessage API
    /// reference), e.g. from the workload's `[config]`. Default 1: one message per receive,
    /// given to [`Handler::on_delivery`]. Above 1, every receive's messages go to
    /// [`Handler::on_batch`], which acknowledges them (e.g. with [`Cx::delete_batch`]).
    fn max_messages(&self, _cx: &Cx) -> u32 {
        1
    }

    /// Handles the messages of one receive (1 to [`Handler::max_messages`]), acknowledgements
    /// included. An error is noted and the open transaction rolled back; messages not deleted
    /// come back when their visibility times out. Default: [`Handler::on_delivery`] for each
    /// in turn, an error noted and rolled back before the next.
    async fn on_batch(&self, cx: &mut Cx, deliveries: Vec<Delivery>) -> Result<(), CallError> {
        for d in deliveries {
            handle_one(self, cx, d).await;
        }
        Ok(())
    }
}

/// The start of the note a worker leaves when its handler returned an error: the failure was
/// surfaced (the checker's acknowledgement and graceful-stop invariants read it).
pub const HANDLER_ERROR: &str = "error: ";

/// Runs `handler` on one delivery; an error is noted ([`HANDLER_ERROR`]) and the open
/// transaction rolled back, as Messenger's worker does.
pub async fn handle_one<H: Handler + ?Sized>(handler: &H, cx: &mut Cx, d: Delivery) {
    cx.handling(&d);
    if let Err(e) = handler.on_delivery(cx, d).await {
        handler_failed(cx, e).await;
    }
}

/// Notes `e` as the handler's error ([`HANDLER_ERROR`]) and rolls back the open transaction.
pub async fn handler_failed(cx: &mut Cx, e: CallError) {
    cx.note(format!("{HANDLER_ERROR}{e}"));
    let _ = cx.rollback().await;
}

/// One cycle of a polling or periodic worker (an outbox relay, a retention job).
#[async_trait(?Send)]
pub trait Poller {
    /// Runs one cycle. It must call [`Cx::idle`] with `true` when the cycle found nothing to
    /// do, so that the drain knows it is quiescent. An error is noted and rolled back.
    async fn run_once(&self, cx: &mut Cx) -> Result<(), CallError>;
}

/// What one worker runs, by the kind of its role.
#[derive(Clone)]
pub enum Program {
    /// For a [`crate::spec::RoleKind::Producer`] role.
    Producer(Rc<dyn Producer>),
    /// For a [`crate::spec::RoleKind::Handler`] role.
    Handler(Rc<dyn Handler>),
    /// For a [`crate::spec::RoleKind::Poller`] or [`crate::spec::RoleKind::Periodic`] role.
    Poller(Rc<dyn Poller>),
}

/// A complete system under test: the programs of a workload's roles, and its schema.
pub trait System {
    /// Its name: `reference`, or the mutant's.
    fn name(&self) -> &str;
    /// DDL run in a fresh PostgreSQL schema before each schedule (the search_path is set).
    fn schema_sql(&self) -> Cow<'_, str>;
    /// The program of the role with prefix `role` (see [`crate::spec::RoleSpec`]), or
    /// `None` when this system has no such role.
    fn program(&self, role: &str) -> Option<Program>;
    /// Whether the producer's upstream (a payment service's own outbox, a retried request)
    /// dispatches an event again until one dispatch is sent. The drain models it: an event
    /// dispatched and never sent is dispatched again once the locks held then have expired
    /// (logical time). Default `true`; a system whose events can be lost at the producer
    /// returns `false`.
    fn retries_upstream(&self) -> bool {
        true
    }
}
