//! The reference system: the payout article's design, correct under at-least-once delivery.
//!
//! - the consumer claims `processed_message` with `ON CONFLICT DO NOTHING RETURNING`, inserts
//!   the payout under `UNIQUE (source_payment_id)` and the outbox row, all in one transaction,
//!   then releases the dispatch lock and deletes the message;
//! - the relay publishes with `FOR UPDATE SKIP LOCKED`, send before mark, at least once;
//! - the downstream consumer has its own claim under its own `consumer_name`;
//! - retention deletes dedup rows older than the window by the logical clock.

pub mod batch;
pub mod consumer;
pub mod downstream;
mod failure;
mod producer;
pub mod relay;
mod retention;
pub mod transaction;

use std::rc::Rc;

use crate::system::*;

pub use consumer::PayoutConsumer;
pub use downstream::SettlementProjection;
pub use failure::{acknowledge, fail_or_retry, park};
pub use producer::DedupProducer;
pub use relay::OutboxRelay;
pub use retention::DedupRetention;

/// The schema of the reference system (`fixtures/schema.sql`).
pub const SCHEMA_SQL: &str = include_str!("../../../../../fixtures/schema.sql");

/// The DeduplicateStamp key of an event: `payment-captured.<event_id>` (the payout article).
pub fn lock_key(event_id: &uuid::Uuid) -> String {
    format!("payment-captured.{event_id}")
}

/// The dispatch lock a message carries (the payout article's DeduplicateStamp: the lock's key, and the
/// token of the producer's `SET … NX`), released by whoever handles the message.
pub struct DispatchLock {
    /// `payment-captured.<event_id>`.
    pub key: String,
    /// The token the producer stored, `None` for a message that carries none.
    pub token: Option<String>,
}

impl DispatchLock {
    /// The dispatch lock of `ev`.
    pub fn of(ev: &crate::messages::PaymentCaptured) -> DispatchLock {
        DispatchLock { key: lock_key(&ev.event_id), token: ev.lock_token.clone() }
    }

    /// Releases it (a yield point named `unlock`): compare-and-delete with the token, so that a
    /// lock that expired and was taken by a later dispatch stays with it; a plain `DEL` when the
    /// message carries no token. Errors: Redis's.
    pub async fn release(&self, cx: &mut crate::system::Cx) -> Result<(), crate::system::CallError> {
        match &self.token {
            Some(token) => cx.unlock("unlock", &self.key, token).await,
            None => cx.unlock_unchecked("unlock", &self.key).await,
        }
    }
}

/// The correct system from the payout article.
pub struct Reference;

impl PayoutSystem for Reference {
    fn name(&self) -> &str {
        "reference"
    }
    fn schema_sql(&self) -> &str {
        SCHEMA_SQL
    }
    fn producer(&self) -> Rc<dyn Producer> {
        Rc::new(DedupProducer)
    }
    fn consumer(&self) -> Rc<dyn Consumer> {
        Rc::new(PayoutConsumer)
    }
    fn relay(&self) -> Rc<dyn Relay> {
        Rc::new(OutboxRelay)
    }
    fn downstream(&self) -> Rc<dyn Downstream> {
        Rc::new(SettlementProjection)
    }
    fn retention(&self) -> Rc<dyn Retention> {
        Rc::new(DedupRetention)
    }
}
