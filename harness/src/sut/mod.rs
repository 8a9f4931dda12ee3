//! The system under test, behind traits so that other handlers plug in.
//!
//! A [`System`] hands out the five roles of seed 000's design: the [`Producer`] of
//! `PaymentCaptured`, the payout [`Consumer`], the outbox [`Relay`], the [`Downstream`]
//! consumer of `MerchantPayoutCreated`, and the dedup [`Retention`] job. Every role reaches
//! the services only through [`Cx`], so every call is a yield point for the scheduler.
//! [`reference`](mod@reference) is the correct implementation from the seed; mutants (known-bad variants)
//! implement the same traits.

pub mod messages;
pub mod mutants;
pub mod reference;

use std::rc::Rc;

use async_trait::async_trait;

pub use crate::sim::cx::{CallError, Cx, Delivery};
use messages::PaymentCaptured;

/// Timing and retry settings of the system, in logical time.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SystemConfig {
    /// SQS visibility timeout, logical s (seed 000 configures 120; scenarios use 30).
    pub visibility_timeout_s: u64,
    /// TTL of the producer's DeduplicateStamp lock, logical s (seed 000: 900).
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
}

impl Default for SystemConfig {
    fn default() -> Self {
        SystemConfig {
            visibility_timeout_s: 30,
            lock_ttl_s: 900,
            retention_s: 14 * 86_400,
            max_retries: 3,
            retry_delay_s: 1,
            relay_batch: 10,
        }
    }
}

/// Publishes `PaymentCaptured` (seed 000: `$bus->dispatch($message, [new DeduplicateStamp(...)])`).
#[async_trait(?Send)]
pub trait Producer {
    /// Dispatches one event: takes the dedup lock, then sends, or is suppressed by the lock.
    async fn dispatch(&self, cx: &mut Cx, event: &PaymentCaptured) -> Result<(), CallError>;
}

/// Handles one delivery from the payments queue, including its acknowledgement
/// (DeleteMessage), retry and parking in the failure transport.
#[async_trait(?Send)]
pub trait Consumer {
    /// Handles `delivery`. Errors are service errors the worker loop logs; a crash simply
    /// drops the future.
    async fn on_delivery(&self, cx: &mut Cx, delivery: Delivery) -> Result<(), CallError>;
}

/// One cycle of an outbox relay: select unpublished rows, send, mark, commit.
#[async_trait(?Send)]
pub trait Relay {
    /// Runs one cycle; marks the worker idle when there was nothing to publish.
    async fn run_once(&self, cx: &mut Cx) -> Result<(), CallError>;
}

/// Handles one `MerchantPayoutCreated` delivery from the payouts queue.
#[async_trait(?Send)]
pub trait Downstream {
    /// Handles `delivery`, including its acknowledgement.
    async fn on_delivery(&self, cx: &mut Cx, delivery: Delivery) -> Result<(), CallError>;
}

/// The dedup retention job.
#[async_trait(?Send)]
pub trait Retention {
    /// Deletes dedup rows older than the retention window, by the logical clock.
    async fn run_once(&self, cx: &mut Cx) -> Result<(), CallError>;
}

/// A complete system under test.
pub trait System {
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
}

/// The system named `name`: `reference`, or a mutant of [`mutants::CATALOGUE`].
/// Error: an unknown name, listing the known ones.
pub fn by_name(name: &str) -> anyhow::Result<Rc<dyn System>> {
    if name == "reference" {
        return Ok(Rc::new(reference::Reference));
    }
    mutants::by_name(name).ok_or_else(|| {
        let known: Vec<&str> = mutants::CATALOGUE.iter().map(|(n, _)| *n).collect();
        anyhow::anyhow!("unknown system `{name}`; known: reference, {}", known.join(", "))
    })
}
