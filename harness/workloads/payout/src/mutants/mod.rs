//! Known-bad handlers (mutants) that the harness must catch. Each one replaces one role of
//! the [`crate::reference::Reference`] system, and possibly its schema.

mod batches;
mod consumers;
mod others;

use std::rc::Rc;

use crate::reference::batch::{self, BatchAck, EntryId, OnFailed, OnStop};
use crate::reference::{self, DedupProducer, DedupRetention, OutboxRelay, PayoutConsumer, SettlementProjection};
use crate::system::*;

pub use batches::*;
pub use consumers::*;
pub use others::*;

/// The reference system with some roles, and possibly the schema, replaced.
pub struct Mutant {
    name: &'static str,
    schema: String,
    consumer: Rc<dyn Consumer>,
    relay: Rc<dyn Relay>,
    downstream: Rc<dyn Downstream>,
    retention: Rc<dyn Retention>,
    retries_upstream: bool,
}

impl Mutant {
    fn new(name: &'static str) -> Mutant {
        Mutant {
            name,
            schema: reference::SCHEMA_SQL.to_string(),
            consumer: Rc::new(PayoutConsumer),
            relay: Rc::new(OutboxRelay),
            downstream: Rc::new(SettlementProjection),
            retention: Rc::new(DedupRetention),
            retries_upstream: true,
        }
    }
    fn without_upstream_retry(mut self) -> Mutant {
        self.retries_upstream = false;
        self
    }
    fn without_payout_unique(mut self) -> Mutant {
        self.schema = schema_without_payout_unique();
        self
    }
    fn with_table(mut self, ddl: &str) -> Mutant {
        self.schema.push_str(ddl);
        self
    }
    fn consumer(mut self, c: impl Consumer + 'static) -> Mutant {
        self.consumer = Rc::new(c);
        self
    }
    fn relay(mut self, r: impl Relay + 'static) -> Mutant {
        self.relay = Rc::new(r);
        self
    }
    fn downstream(mut self, d: impl Downstream + 'static) -> Mutant {
        self.downstream = Rc::new(d);
        self
    }
    fn retention(mut self, r: impl Retention + 'static) -> Mutant {
        self.retention = Rc::new(r);
        self
    }
}

impl PayoutSystem for Mutant {
    fn name(&self) -> &str {
        self.name
    }
    fn schema_sql(&self) -> &str {
        &self.schema
    }
    fn producer(&self) -> Rc<dyn Producer> {
        Rc::new(DedupProducer)
    }
    fn consumer(&self) -> Rc<dyn Consumer> {
        self.consumer.clone()
    }
    fn relay(&self) -> Rc<dyn Relay> {
        self.relay.clone()
    }
    fn downstream(&self) -> Rc<dyn Downstream> {
        self.downstream.clone()
    }
    fn retention(&self) -> Rc<dyn Retention> {
        self.retention.clone()
    }
    fn retries_upstream(&self) -> bool {
        self.retries_upstream
    }
}

/// The reference schema without the payout's business unique constraint.
pub fn schema_without_payout_unique() -> String {
    let s = reference::SCHEMA_SQL.replace(
        ",\n    CONSTRAINT uq_payout_source_payment UNIQUE (source_payment_id)",
        "",
    );
    assert_ne!(s, reference::SCHEMA_SQL, "the payout constraint moved in fixtures/schema.sql");
    s
}

/// The mutants' names, with what each does wrong.
pub const CATALOGUE: &[(&str, &str)] = &[
    ("no-dedup", "no processed_message claim, and no unique constraint on the payout"),
    ("check-then-insert", "SELECT EXISTS on the payout, then INSERT, with no unique constraint"),
    ("redis-only-dedup", "Redis SET NX with a TTL is the only record of processed; no durable row, no unique constraint"),
    ("dedup-separate-tx", "the dedup row commits in its own transaction before the business effect"),
    ("key-per-attempt", "a fresh id per attempt is used as the message identity"),
    ("ack-before-commit", "DeleteMessage is called before the transaction commits"),
    ("relay-mark-before-send", "the relay commits published_at, then sends"),
    ("naive-downstream", "the downstream consumer has no dedup"),
    ("short-retention", "dedup rows are purged after 1 s, with no unique constraint on the payout"),
    ("lock-released-on-failure", "the dispatch lock is released when the handler throws (with no-dedup)"),
    ("skip-without-delete", "a detected duplicate returns without deleting the message"),
    ("park-failure-acked", "writing to the failure transport fails, and the message is deleted anyway"),
    ("relay-mark-fails-after-send", "the relay's mark errors after a successful send (with naive-downstream)"),
    ("balance-increment", "UPDATE balance = balance + amount with no dedup record (the counter article's counter)"),
    ("no-upstream-retry", "nothing upstream dispatches an event again: a dispatch suppressed by a dead producer's lock is lost"),
    ("lock-without-token", "the consumer releases the dispatch lock with a plain DEL, not a compare-and-delete of its token: it deletes a later dispatch's lock"),
    ("relay-watermark", "the relay selects rows created after the last one it published; a transaction that commits late is never published"),
    ("batch-ignores-failed-deletes", "a batch consumer (10 per receive) ignores the entries DeleteMessageBatch reports as failed"),
    ("batch-entry-id-identity", "a batch consumer (10 per receive) uses the event id as its DeleteMessageBatch entry id: two deliveries of one event in a batch get the whole batch rejected"),
    ("stop-keeps-prefetched", "a batch consumer (10 per receive) asked to stop keeps the messages it has not started: they stay invisible until their visibility timeout"),
    ("stop-drops-acks", "a batch consumer (10 per receive) asked to stop exits without deleting the messages it handled: they are delivered again"),
    ("stop-resends-copies", "a batch consumer (10 per receive) asked to stop sends each message it has not started back as a new copy and releases the original too: copies pile up"),
];

/// The mutant named `name`, if any.
pub fn by_name(name: &str) -> Option<Rc<dyn PayoutSystem>> {
    let m = Mutant::new(CATALOGUE.iter().find(|(n, _)| *n == name)?.0);
    let m = match name {
        "no-dedup" => m.without_payout_unique().consumer(Acked(NoDedup)),
        "check-then-insert" => m.without_payout_unique().consumer(Acked(CheckThenInsert)),
        "redis-only-dedup" => m.without_payout_unique().consumer(RedisOnlyDedup),
        "dedup-separate-tx" => m.consumer(Acked(DedupSeparateTx)),
        "key-per-attempt" => m.consumer(KeyPerAttempt),
        "ack-before-commit" => m.consumer(AckBeforeCommit),
        "relay-mark-before-send" => m.relay(MarkBeforeSend),
        "naive-downstream" => m.downstream(NaiveDownstream),
        "short-retention" => m.without_payout_unique().consumer(Acked(DedupTableOnly)).retention(ShortRetention),
        "lock-released-on-failure" => m.without_payout_unique().consumer(LockReleasedOnFailure),
        "skip-without-delete" => m.consumer(SkipWithoutDelete),
        "park-failure-acked" => m.consumer(ParkFailureAcked),
        "relay-mark-fails-after-send" => m.relay(MarkFailsAfterSend::default()).downstream(NaiveDownstream),
        "balance-increment" => m.consumer(Acked(BalanceIncrement)),
        "no-upstream-retry" => m.without_upstream_retry(),
        "lock-without-token" => m.consumer(LockWithoutToken),
        "relay-watermark" => m.with_table(WATERMARK_SQL).relay(WatermarkRelay),
        "batch-ignores-failed-deletes" => m.consumer(BatchConsumer(BatchAck { on_failed: OnFailed::Ignore, ..batch::REFERENCE })),
        "batch-entry-id-identity" => m.consumer(BatchConsumer(BatchAck { entry_id: EntryId::Identity, ..batch::REFERENCE })),
        "stop-keeps-prefetched" => m.consumer(BatchConsumer(BatchAck { on_stop: OnStop::KeepPrefetched, ..batch::REFERENCE })),
        "stop-drops-acks" => m.consumer(BatchConsumer(BatchAck { on_stop: OnStop::DropAcks, ..batch::REFERENCE })),
        "stop-resends-copies" => m.consumer(BatchConsumer(BatchAck { on_stop: OnStop::ResendCopies, ..batch::REFERENCE })),
        _ => return None,
    };
    Some(Rc::new(m))
}
