//! The payout system's roles, behind traits so that mutants replace one at a time.
//!
//! A [`PayoutSystem`] hands out the five roles of the payout article's design: the [`Producer`] of
//! `PaymentCaptured`, the payout [`Consumer`], the outbox [`Relay`], the [`Downstream`]
//! consumer of `MerchantPayoutCreated`, and the dedup [`Retention`] job. Every role reaches
//! the services only through [`Cx`], so every call is a yield point for the scheduler.
//! [`crate::reference`] is the correct implementation from the seed; mutants (known-bad
//! variants) implement the same traits. [`AsSystem`] presents one to the engine.

use std::borrow::Cow;
use std::rc::Rc;

use async_trait::async_trait;

pub use crashpoint::{CallError, Cx, Delivery, Event};
pub use crashpoint::{Handler as Consumer, Handler as Downstream, Poller as Relay, Poller as Retention};
use crashpoint::{Program, System};

use crate::messages::PaymentCaptured;

/// Timing and retry settings of the system, in logical time.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SystemConfig {
    /// TTL of the producer's DeduplicateStamp lock, logical s (the payout article: 900).
    pub lock_ttl_s: u64,
    /// How long dedup rows are kept, logical s.
    pub retention_s: u64,
    /// Messenger `max_retries`: retries after the first attempt before the message is parked
    /// in the failure transport.
    pub max_retries: u32,
    /// Delay before the first retry, logical s; doubled on each further retry.
    pub retry_delay_s: u64,
    /// Outbox rows a relay selects at once (`LIMIT n`).
    pub relay_batch: i64,
    /// Messages the payout consumer receives at once (SQS `MaxNumberOfMessages`, 1 to 10).
    /// Above 1 it handles each in its own transaction and deletes them with one
    /// DeleteMessageBatch ([`crate::reference::batch`]).
    pub max_messages: u32,
}

impl Default for SystemConfig {
    fn default() -> Self {
        SystemConfig {
            lock_ttl_s: 900,
            retention_s: 14 * 86_400,
            max_retries: 3,
            retry_delay_s: 1,
            relay_batch: 10,
            max_messages: 1,
        }
    }
}

/// Publishes `PaymentCaptured` (the payout article: `$bus->dispatch($message, [new DeduplicateStamp(...)])`).
#[async_trait(?Send)]
pub trait Producer {
    /// Dispatches one event: takes the dedup lock, then sends, or is suppressed by the lock.
    async fn dispatch(&self, cx: &mut Cx, event: &PaymentCaptured) -> Result<(), CallError>;
}

/// A [`Producer`] as the engine's producer: decodes the scenario event's body.
struct Dispatcher(Rc<dyn Producer>);

#[async_trait(?Send)]
impl crashpoint::Producer for Dispatcher {
    async fn dispatch(&self, cx: &mut Cx, event: &Event) -> Result<(), CallError> {
        let ev: PaymentCaptured = event.decode().map_err(|e| CallError::Service(format!("PaymentCaptured: {e}")))?;
        self.0.dispatch(cx, &ev).await
    }
}

/// The payout system's five roles (the reference, or a mutant).
pub trait PayoutSystem {
    /// Its name, e.g. `reference`.
    fn name(&self) -> &str;
    /// DDL run in a fresh schema before each schedule.
    fn schema_sql(&self) -> &str;
    /// The producer.
    fn producer(&self) -> Rc<dyn Producer>;
    /// The payout consumer.
    fn consumer(&self) -> Rc<dyn Consumer>;
    /// The outbox relay.
    fn relay(&self) -> Rc<dyn Relay>;
    /// The downstream consumer.
    fn downstream(&self) -> Rc<dyn Downstream>;
    /// The retention job.
    fn retention(&self) -> Rc<dyn Retention>;
    /// Whether the upstream of the producer (the payment service) dispatches a
    /// `PaymentCaptured` again until one is sent (see [`System::retries_upstream`]).
    fn retries_upstream(&self) -> bool {
        true
    }
}

/// A [`PayoutSystem`] as the engine's [`System`]: `p` producer, `c` consumer, `r` relay,
/// `d` downstream, `ret` retention.
pub struct AsSystem(pub Rc<dyn PayoutSystem>);

impl System for AsSystem {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn schema_sql(&self) -> Cow<'_, str> {
        Cow::Borrowed(self.0.schema_sql())
    }
    fn program(&self, role: &str) -> Option<Program> {
        Some(match role {
            "p" => Program::Producer(Rc::new(Dispatcher(self.0.producer()))),
            "c" => Program::Handler(self.0.consumer()),
            "r" => Program::Poller(self.0.relay()),
            "d" => Program::Handler(self.0.downstream()),
            "ret" => Program::Poller(self.0.retention()),
            _ => return None,
        })
    }
    fn retries_upstream(&self) -> bool {
        self.0.retries_upstream()
    }
}
