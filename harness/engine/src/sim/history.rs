//! The history: every step and fault in order, with logical time. The checker and the trace
//! read it; nothing in it depends on wall-clock time or random ids.

use serde::Serialize;
use uuid::Uuid;

use crate::workload::CrashPoint;

/// What a call did to the world, in terms the checker and the logical clock need.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Fact {
    /// A message was accepted by SQS. `identity` is the message identity in its body
    /// (`event_id` or `outbox_id`).
    Sent { queue: &'static str, msg: String, identity: Uuid },
    /// A message was received; `receipt` is the real receipt handle (never printed).
    Received { queue: &'static str, msg: String, receive_count: u32, #[serde(skip)] receipt: String },
    /// DeleteMessage succeeded for `msg`.
    Deleted { queue: &'static str, msg: String },
    /// ChangeMessageVisibility set `msg` to become visible `secs` logical seconds from now.
    VisibilityChanged { queue: &'static str, msg: String, secs: u64 },
    /// A Redis lock was taken with a TTL (logical ms).
    LockTaken { key: String, ttl_ms: u64 },
    /// A Redis lock was deleted.
    LockReleased { key: String },
    /// The call's outcome depends on an SQS behaviour that endpoints differ on; `behaviour` is
    /// the calibration probe's name (e.g. `stale-receipt-handle`).
    DependsOn { behaviour: String },
}

/// The service a call went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Service {
    /// PostgreSQL.
    Postgres,
    /// SQS.
    Sqs,
    /// Redis.
    Redis,
    /// No call was made (an injected failure replaced it).
    None,
}

/// One call a worker made: its result and what it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// Logical time of the call, ms.
    pub t_ms: u64,
    /// Worker name.
    pub worker: String,
    /// The call, e.g. `claim`, `commit`, `recv`.
    pub op: String,
    /// The service it went to.
    pub service: Service,
    /// The crash point the worker stood at before the call.
    pub at: Option<CrashPoint>,
    /// A short result, e.g. `1 row`, `no row`, `m1 (receive 2)`.
    pub result: String,
    /// Facts for the checker and the clock.
    pub facts: Vec<Fact>,
}

/// One entry of the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Entry {
    /// A completed call.
    Step(Step),
    /// A call is waiting on another worker's lock (from `pg_blocking_pids`).
    Blocked { t_ms: u64, worker: String, op: String, by: Vec<String> },
    /// A worker was killed, at a crash point or in the middle of a call.
    Crash { t_ms: u64, worker: String, at: Option<CrashPoint>, op: Option<String> },
    /// A crashed worker was restarted with fresh software.
    Restart { t_ms: u64, worker: String },
    /// The nemesis did something to the world (expiry, replay, retention, clock).
    Fault { t_ms: u64, what: String, facts: Vec<Fact> },
    /// A worker explained a decision (duplicate skipped, parked, …).
    Note { t_ms: u64, worker: String, text: String },
}

/// The ordered history of one schedule.
#[derive(Debug, Clone, Default, Serialize)]
pub struct History {
    /// Entries in the order they happened.
    pub entries: Vec<Entry>,
}

impl History {
    /// All facts, in order.
    pub fn facts(&self) -> impl Iterator<Item = &Fact> {
        self.entries.iter().flat_map(|e| match e {
            Entry::Step(s) => s.facts.iter(),
            Entry::Fault { facts, .. } => facts.iter(),
            _ => [].iter(),
        })
    }

    /// Calibration behaviours (probe names) that some call of this history depended on.
    pub fn depends_on(&self) -> std::collections::BTreeSet<String> {
        self.facts()
            .filter_map(|f| match f {
                Fact::DependsOn { behaviour } => Some(behaviour.clone()),
                _ => None,
            })
            .collect()
    }

    /// The steps, in order.
    pub fn steps(&self) -> impl Iterator<Item = &Step> {
        self.entries.iter().filter_map(|e| match e {
            Entry::Step(s) => Some(s),
            _ => None,
        })
    }
}
