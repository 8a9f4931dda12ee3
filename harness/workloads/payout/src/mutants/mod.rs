//! Known-bad handlers (mutants) that the harness must catch. Each one replaces one role of
//! the [`crate::reference::Reference`] system, and possibly its schema.

mod batches;
mod consumers;
mod harmless;
mod others;

use std::rc::Rc;

use crate::reference::batch::{self, BatchAck, EntryId, OnFailed, OnStop};
use crate::reference::{self, DedupProducer, DedupRetention, OutboxRelay, PayoutConsumer, SettlementProjection};
use crate::system::*;
use crashpoint::SystemInfo;

pub use batches::*;
pub use consumers::*;
pub use harmless::*;
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
    let s = reference::SCHEMA_SQL.replace(",\n    CONSTRAINT uq_payout_source_payment UNIQUE (source_payment_id)", "");
    assert_ne!(s, reference::SCHEMA_SQL, "the payout constraint moved in fixtures/schema.sql");
    s
}

/// One system of the catalogue besides the reference: what it is, and how it is built from
/// the reference (the roles, and possibly the schema, it replaces). Registered here only: the
/// workload's `systems()` and `system()` both read [`CATALOGUE`].
pub struct Variant {
    /// Its name, what it does, and whether it must pass ([`SystemInfo::harmless`]) or be
    /// caught ([`SystemInfo::mutant`]).
    pub info: SystemInfo,
    build: fn(Mutant) -> Mutant,
}

/// The catalogue: the mutants the harness must catch, each with what it does wrong, and the
/// harmless variants it must not (they differ from the reference and are still correct).
pub const CATALOGUE: &[Variant] = &[
    Variant { info: SystemInfo::mutant("no-dedup", "no processed_message claim, and no unique constraint on the payout"), build: |m| m.without_payout_unique().consumer(Acked(NoDedup)) },
    Variant { info: SystemInfo::mutant("check-then-insert", "SELECT EXISTS on the payout, then INSERT, with no unique constraint"), build: |m| m.without_payout_unique().consumer(Acked(CheckThenInsert)) },
    Variant { info: SystemInfo::mutant("redis-only-dedup", "Redis SET NX with a TTL is the only record of processed; no durable row, no unique constraint"), build: |m| m.without_payout_unique().consumer(RedisOnlyDedup) },
    Variant { info: SystemInfo::mutant("dedup-separate-tx", "the dedup row commits in its own transaction before the business effect"), build: |m| m.consumer(Acked(DedupSeparateTx)) },
    Variant { info: SystemInfo::mutant("key-per-attempt", "a fresh id per attempt is used as the message identity"), build: |m| m.consumer(KeyPerAttempt) },
    Variant { info: SystemInfo::mutant("ack-before-commit", "DeleteMessage is called before the transaction commits"), build: |m| m.consumer(AckBeforeCommit) },
    Variant { info: SystemInfo::mutant("relay-mark-before-send", "the relay commits published_at, then sends"), build: |m| m.relay(MarkBeforeSend) },
    Variant { info: SystemInfo::mutant("naive-downstream", "the downstream consumer has no dedup"), build: |m| m.downstream(NaiveDownstream) },
    Variant { info: SystemInfo::mutant("short-retention", "dedup rows are purged after 1 s, with no unique constraint on the payout"), build: |m| m.without_payout_unique().consumer(Acked(DedupTableOnly)).retention(ShortRetention) },
    Variant { info: SystemInfo::mutant("lock-released-on-failure", "the dispatch lock is released when the handler throws (with no-dedup)"), build: |m| m.without_payout_unique().consumer(LockReleasedOnFailure) },
    Variant { info: SystemInfo::mutant("skip-without-delete", "a detected duplicate returns without deleting the message"), build: |m| m.consumer(SkipWithoutDelete) },
    Variant { info: SystemInfo::mutant("park-failure-acked", "writing to the failure transport fails, and the message is deleted anyway"), build: |m| m.consumer(ParkFailureAcked) },
    Variant { info: SystemInfo::mutant("relay-mark-fails-after-send", "the relay's mark errors after a successful send (with naive-downstream)"), build: |m| m.relay(MarkFailsAfterSend::default()).downstream(NaiveDownstream) },
    Variant { info: SystemInfo::mutant("balance-increment", "UPDATE balance = balance + amount with no dedup record (the counter article's counter)"), build: |m| m.consumer(Acked(BalanceIncrement)) },
    Variant { info: SystemInfo::mutant("no-upstream-retry", "nothing upstream dispatches an event again: a dispatch suppressed by a dead producer's lock is lost"), build: |m| m.without_upstream_retry() },
    Variant { info: SystemInfo::mutant("lock-without-token", "the consumer releases the dispatch lock with a plain DEL, not a compare-and-delete of its token: it deletes a later dispatch's lock"), build: |m| m.consumer(LockWithoutToken) },
    Variant { info: SystemInfo::mutant("relay-watermark", "the relay selects rows created after the last one it published; a transaction that commits late is never published"), build: |m| m.with_table(WATERMARK_SQL).relay(WatermarkRelay) },
    Variant { info: SystemInfo::mutant("batch-ignores-failed-deletes", "a batch consumer (10 per receive) ignores the entries DeleteMessageBatch reports as failed"), build: |m| m.consumer(BatchConsumer(BatchAck { on_failed: OnFailed::Ignore, ..batch::REFERENCE })) },
    Variant { info: SystemInfo::mutant("batch-entry-id-identity", "a batch consumer (10 per receive) uses the event id as its DeleteMessageBatch entry id: two deliveries of one event in a batch get the whole batch rejected"), build: |m| m.consumer(BatchConsumer(BatchAck { entry_id: EntryId::Identity, ..batch::REFERENCE })) },
    Variant { info: SystemInfo::mutant("stop-keeps-prefetched", "a batch consumer (10 per receive) asked to stop keeps the messages it has not started: they stay invisible until their visibility timeout"), build: |m| m.consumer(BatchConsumer(BatchAck { on_stop: OnStop::KeepPrefetched, ..batch::REFERENCE })) },
    Variant { info: SystemInfo::mutant("stop-drops-acks", "a batch consumer (10 per receive) asked to stop exits without deleting the messages it handled: they are delivered again"), build: |m| m.consumer(BatchConsumer(BatchAck { on_stop: OnStop::DropAcks, ..batch::REFERENCE })) },
    Variant { info: SystemInfo::mutant("stop-resends-copies", "a batch consumer (10 per receive) asked to stop sends each message it has not started back as a new copy and releases the original too: copies pile up"), build: |m| m.consumer(BatchConsumer(BatchAck { on_stop: OnStop::ResendCopies, ..batch::REFERENCE })) },
    Variant {
        info: SystemInfo::mutant(
            "outbox-in-second-tx",
            "the claim and the payout commit, then the outbox row commits in a transaction of its own: a crash between the two commits, where no crash point is marked, loses the event",
        ),
        build: |m| m.consumer(Acked(OutboxInSecondTx)),
    },
    Variant {
        info: SystemInfo::harmless(
            "inbox-lookup-first",
            "looks the event up in processed_message before its transaction and skips a duplicate it finds there; the claim in the transaction still guards the race",
        ),
        build: |m| m.consumer(InboxLookupFirst),
    },
];

/// The system of the catalogue named `name`, if any.
pub fn by_name(name: &str) -> Option<Rc<dyn PayoutSystem>> {
    let v = CATALOGUE.iter().find(|v| v.info.name == name)?;
    Some(Rc::new((v.build)(Mutant::new(v.info.name))))
}
