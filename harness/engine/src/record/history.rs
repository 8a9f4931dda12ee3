//! The history: every step and fault in order, with logical time. The checker and the trace
//! read it; nothing in it depends on wall-clock time or random ids.

use serde::Serialize;
use uuid::Uuid;

use crate::spec::CrashPoint;

/// What a call did to the world, in terms the checker and the logical clock need.
// Each variant's doc names and explains its fields.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Fact {
    /// The producer began to dispatch scenario event `event` (identity `identity`): recorded
    /// with its first call, before any lock, for every attempt (the scenario's events,
    /// `dispatch:<event>`, the drain's upstream retries).
    Dispatched { event: String, identity: Uuid },
    /// A message was accepted by SQS. `identity` is the message identity in its body
    /// (`event_id` or `outbox_id`).
    Sent { queue: &'static str, msg: String, identity: Uuid },
    /// A send to a FIFO queue was accepted and dropped: SQS had accepted the identity's
    /// deduplication id as `msg` less than 5 min before (`crate::sim::fifo`). `replay` when
    /// the workload's fault sent it (a replay from the failure transport), not a worker.
    Suppressed { queue: &'static str, msg: String, identity: Uuid, replay: bool },
    /// A message was received; `receipt` is the real receipt handle (never printed).
    Received { queue: &'static str, msg: String, receive_count: u32, #[serde(skip)] receipt: String },
    /// DeleteMessage (or an entry of DeleteMessageBatch) succeeded for `msg`.
    Deleted { queue: &'static str, msg: String },
    /// An entry of DeleteMessageBatch failed for `msg`: the message was not deleted, though
    /// the call returned HTTP 200 (DeleteMessageBatch API reference: "check for batch errors
    /// even when the call returns an HTTP status code of 200").
    DeleteFailed { queue: &'static str, msg: String },
    /// The worker began to handle `msg` (recorded with its next call): a handler error after
    /// it gives `msg` up to its visibility timeout on purpose.
    Handling { msg: String },
    /// ChangeMessageVisibility set `msg` to become visible `secs` logical seconds from now.
    VisibilityChanged { queue: &'static str, msg: String, secs: u64 },
    /// A Redis lock was taken (`SET key value NX …`) with a TTL of `ttl_ms` logical ms, or
    /// none (`None`: the key stays until deleted).
    LockTaken { key: String, ttl_ms: Option<u64> },
    /// A Redis command wrote `key` (any command but a lock's `SET … NX`) and left its expiry as
    /// `expiry` says ([`crate::sim::model::redis`]).
    KeyWritten { key: String, expiry: Expiry },
    /// A Redis lock held by another was lost just before this call asked for it (an armed
    /// `redis:lose-lock`, [`crate::nemesis::redis`]): the harness deleted `key`, and the call
    /// then took the lock (a [`Fact::LockTaken`] follows).
    LockLost { key: String },
    /// A Redis lock was deleted (recorded only when the call deleted it). `checked` when the
    /// release proved it held the lock (a compare-and-delete of its token, which deletes
    /// nothing otherwise); `false` for a plain `DEL`.
    LockReleased { key: String, checked: bool },
    /// A statement outside a transaction block wrote rows, committed as it completed
    /// (autocommit, [`crate::sim::model::pg`]): other workers see it now, as after a COMMIT.
    AutocommitWrite,
    /// The call's outcome depends on an SQS behaviour that endpoints differ on; `behaviour` is
    /// the calibration probe's name (e.g. `stale-receipt-handle`).
    DependsOn { behaviour: String },
}

/// What a command that wrote a key did to its expiry (Redis documentation, "EXPIRE").
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Expiry {
    /// Left as it was (`INCR`, `HSET`, `LPUSH`, `SET … KEEPTTL`, a Lua script's writes).
    Keep,
    /// None from now on: the key was overwritten (`SET` without an expiry, `GETSET`, `MSET`),
    /// made persistent (`PERSIST`), or deleted (`DEL`, `UNLINK`, `GETDEL`, a non-positive
    /// `EXPIRE`).
    Never,
    /// Expires this many logical ms from now.
    In(u64),
}

/// Counts of real calls, per service.
#[derive(Debug, Default, Clone, Copy, serde::Serialize, PartialEq, Eq)]
pub struct CallCounts {
    /// PostgreSQL statements (BEGIN and COMMIT included).
    pub pg: u32,
    /// SQS API calls.
    pub sqs: u32,
    /// Redis commands.
    pub redis: u32,
    /// HTTP requests to the workload's providers over the simulated network.
    pub net: u32,
}

impl CallCounts {
    /// Counts one call to `service` (none for [`Service::None`]: the call was not made).
    pub fn add(&mut self, service: Service) {
        match service {
            Service::Postgres => self.pg += 1,
            Service::Sqs => self.sqs += 1,
            Service::Redis => self.redis += 1,
            Service::Http => self.net += 1,
            Service::None => {}
        }
    }
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
    /// A provider, over HTTP on the simulated network (`crate::provider`).
    Http,
    /// No call was made (an injected failure replaced it).
    None,
}

/// What a call returned, as data; `crate::record::trace` turns it into text.
// Each variant's doc names and explains its fields.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// A statement without rows (BEGIN, COMMIT, ROLLBACK) succeeded.
    Done,
    /// A statement affected `n` rows (INSERT, UPDATE, DELETE without RETURNING).
    Affected { n: u64 },
    /// A query returned `n` rows (a read, e.g. a relay's select).
    Fetched { n: u64 },
    /// A statement returning at most one row (`… RETURNING`) returned one, or none.
    Returned { row: bool },
    /// ReceiveMessage returned message `msg`, received for the `receive_count`-th time.
    Received { msg: String, receive_count: u32 },
    /// ReceiveMessage returned a message that the nemesis lost on its way (`sqs:receive-lost`).
    ReceiveLost { msg: String, receive_count: u32 },
    /// ReceiveMessage returned several messages (`MaxNumberOfMessages` > 1): each label with
    /// its receive count; `lost` when the nemesis lost the whole response (`sqs:receive-lost`).
    ReceivedBatch { msgs: Vec<(String, u32)>, lost: bool },
    /// ReceiveMessage returned nothing.
    Empty,
    /// SendMessage accepted message `msg` with identity label `who`.
    Sent { msg: String, who: String },
    /// SendMessage to a FIFO queue was accepted and dropped as a duplicate of `msg` (identity
    /// label `who`), accepted at logical `first_ms`.
    Suppressed { msg: String, who: String, first_ms: u64 },
    /// DeleteMessage deleted `msg`; `stale` when the receipt handle was not the latest (AWS
    /// may keep the message then).
    Deleted { msg: String, stale: bool },
    /// DeleteMessage returned OK with a stale handle and deleted nothing (`sqs:stale-delete-noop`,
    /// or a handle of a message that `sqs:redeliver-after-delete` replaced by a copy).
    NotDeleted { msg: String },
    /// DeleteMessageBatch returned HTTP 200: `deleted` were deleted, `failed` were not (their
    /// entries came back in `Failed`, each with its code), `kept` succeeded and deleted nothing
    /// (a stale receipt handle under `sqs:stale-delete-noop`).
    BatchDeleted { deleted: Vec<String>, kept: Vec<String>, failed: Vec<(String, String)> },
    /// SendMessageBatch: the messages accepted, each with its identity's label (`(msg, who)`),
    /// those a FIFO queue accepted and dropped as duplicates (`(msg, who)`), and the entries
    /// SQS failed, by entry id with their error code.
    BatchSent { sent: Vec<(String, String)>, suppressed: Vec<(String, String)>, failed: Vec<(String, String)> },
    /// ChangeMessageVisibilityBatch: each message hidden for `secs` logical seconds (`(msg,
    /// secs)`), and the entries SQS failed, by message (or entry id) with their error code.
    BatchHidden { hidden: Vec<(String, u64)>, failed: Vec<(String, String)> },
    /// ChangeMessageVisibility: `msg` is visible again in `secs` logical seconds.
    Hidden { msg: String, secs: u64 },
    /// `SET NX` took the lock (`true`) or found it held.
    Locked { taken: bool },
    /// `DEL` released a held lock (`true`) or found none.
    Unlocked { held: bool },
    /// An injected failure at crash point `at` replaced the call.
    Injected { at: CrashPoint },
    /// An external worker's call was answered by its proxy with a service error, injected at
    /// crash point `at` (`fail@point`); the call never reached the service.
    ServiceErrorInjected { at: CrashPoint },
    /// The service returned an error (ids already replaced by labels).
    Error { message: String },
    /// Provider `provider` answered with HTTP `status`.
    Http { provider: String, status: u16 },
    /// No response came from `provider` (`why`: the timeout, a refused connection): the
    /// worker cannot know whether the request was applied.
    NoResponse { provider: String, why: String },
    /// `provider` POSTed webhook event `event` to the worker's endpoint, its `attempt`-th
    /// delivery ([`crate::sim::net::webhook`]); the endpoint's answer is in the provider's lane.
    Delivered { provider: String, event: String, attempt: u32 },
    /// The worker's endpoint answered `provider`'s webhook delivery with `status` (`None`: the
    /// connection closed without an answer), and the answer reached the provider.
    Answered { provider: String, status: Option<u16> },
}

impl Outcome {
    /// Whether the call failed (an error, or an injected failure).
    pub fn failed(&self) -> bool {
        matches!(self, Outcome::Error { .. } | Outcome::Injected { .. } | Outcome::ServiceErrorInjected { .. } | Outcome::NoResponse { .. })
            || matches!(self, Outcome::Http { status, .. } if *status >= 400)
            || matches!(self, Outcome::Answered { status, .. } if !status.is_some_and(|s| (200..300).contains(&s)))
    }

    /// Whether a ReceiveMessage's response was lost on its way (`sqs:receive-lost`, one message
    /// or several): the consumer got nothing.
    pub fn receive_lost(&self) -> bool {
        matches!(self, Outcome::ReceiveLost { .. } | Outcome::ReceivedBatch { lost: true, .. })
    }

    /// Whether a statement found nothing: no row returned, affected or fetched (a poll that
    /// found no work).
    pub fn no_rows(&self) -> bool {
        matches!(self, Outcome::Returned { row: false } | Outcome::Affected { n: 0 } | Outcome::Fetched { n: 0 })
    }

    /// Whether the call wrote at least one row: an INSERT/UPDATE/DELETE that affected rows, or a
    /// statement with `RETURNING` that returned one (reads are [`Outcome::Fetched`]).
    pub fn wrote(&self) -> bool {
        matches!(self, Outcome::Affected { n } if *n >= 1) || matches!(self, Outcome::Returned { row: true })
    }
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
    /// What it returned.
    pub outcome: Outcome,
    /// Whether the call found nothing to do (an empty receive, a poll that found no rows): the
    /// worker is idle after it. Set by the worker ([`crate::sim::cx::Cx::idle`]).
    pub idle: bool,
    /// Facts for the checker and the clock.
    pub facts: Vec<Fact>,
    /// Which of a concurrent worker's calls in flight this is, for a reader: the message or
    /// row it is about (`e1`, `m2`; ids replaced by their labels), `None` for other workers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

/// Something the nemesis or the scheduler did to the world, as data; the trace words it.
// Each variant's doc names and explains its fields.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum FaultEvent {
    /// A generated decision could not apply and was skipped.
    Skipped { decision: String, why: String },
    /// A crash (`kind` `crash`) or failure (`fail`) at a point the worker could not reach yet
    /// was armed; it fires when the worker gets there.
    Armed { worker: String, kind: String, at: CrashPoint, why: String },
    /// An armed crash fired.
    ArmedFires { worker: String, at: CrashPoint },
    /// The logical clock advanced by `ms` (in the drain when `drain`).
    Clock { ms: u64, drain: bool },
    /// `pause:`: real time passed for the workers' own timers, ms.
    Pause { ms: u64 },
    /// A visibility timeout expired; `found` is false when SQS no longer had the message.
    VisibilityExpired { msg: String, found: bool },
    /// `msg` outlived its queue's retention (`retention_ms`, logical) and SQS deleted it;
    /// `found` is false when SQS no longer had it.
    Expired { msg: String, queue: &'static str, retention_ms: u64, found: bool },
    /// `msg` had been received `receive_count` times, its source queue's `maxReceiveCount`,
    /// and was visible again at a receive from `from`: SQS moved it to dead-letter queue `to`,
    /// where it is labelled `copy` (SQS keeps the MessageId; a label of its own keeps the two
    /// queues' histories apart), with its enqueue time (`enqueued_ms`), so it expires there at
    /// `expires_ms` (logical).
    DeadLettered {
        msg: String,
        copy: String,
        from: &'static str,
        to: &'static str,
        receive_count: u32,
        enqueued_ms: u64,
        expires_ms: u64,
    },
    /// A dead-letter queue redrive (`sqs:redrive`, or the drain's operator) moved `msg` from
    /// `from` back to its source queue `to` as `copy`, a new message with a new MessageId and
    /// enqueue time.
    Redriven { msg: String, from: &'static str, to: &'static str, copy: String },
    /// A lock's TTL expired (key with ids replaced by labels).
    LockExpired { key: String },
    /// A key's expiry passed (a key written with one that is not a lock: a dedup marker, a
    /// cached value), with ids replaced by labels.
    KeyExpired { key: String },
    /// Redis restarted without persistence, losing `locks` locks held and `keys` other keys
    /// the schedule wrote.
    RedisRestart { locks: usize, keys: usize },
    /// The producer will dispatch `event` again.
    Dispatch { producer: String, event: String },
    /// An AWS-only SQS behaviour was armed (`sqs:<name>`), announced as `text`.
    Sqs { name: String, text: String },
    /// A PostgreSQL outcome fault (`pg:<name>`) was armed, announced as `text`.
    Pg { name: String, text: String },
    /// A Redis fault (`redis:<name>`, not `restart`) was armed, announced as `text`.
    Redis { name: String, text: String },
    /// An armed `redis:lose-lock` fired: the lock `key` (ids replaced by labels), held by
    /// another, was lost as `by` asked for it, and `by` took it.
    LockLost { key: String, by: String },
    /// `msg` was delivered once more after its delete (`sqs:redeliver-after-delete`).
    Redelivered { msg: String },
    /// A network or provider fault (`net:…@<p>`, `provider:…@<p>`), announced as `text`.
    Net { name: String, text: String },
    /// A fault of the workload's own (`name`), worded by the workload.
    Workload { name: String, text: String },
    /// `worker` falls behind (`c1:lag`, `c1:lag@recv`): in the drain it waits before its next
    /// call `before` (`commit`, `recv`) until the others settle.
    Lag { worker: String, before: String },
    /// The drain phase started.
    DrainStart,
    /// No worker stepped in a drain round: the workers that fell behind and waited before
    /// their call (`workers`) catch up; those that reached none (`idle`, each with the call it
    /// would have waited before: a producer at `commit`, a worker with nothing to do) held
    /// nothing.
    CatchUp { workers: Vec<String>, idle: Vec<(String, String)> },
    /// The drain found work pending (`left`, e.g. `1 unpublished outbox row(s)`) and polls again.
    DrainPending { left: String },
    /// The drain dispatches `events` again: they were dispatched and never sent, and the
    /// producer's upstream retries until a dispatch succeeds (after the locks expired).
    UpstreamRetry { events: Vec<String> },
}

/// One entry of the history.
// Each variant's doc names and explains its fields.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Entry {
    /// A completed call.
    Step(Step),
    /// A call is waiting on another worker's lock (from `pg_blocking_pids`).
    Blocked { t_ms: u64, worker: String, op: String, by: Vec<String> },
    /// A worker was killed, at a crash point or in the middle of a call; or, when `graceful`,
    /// it stopped on its own after a `stop`, at its receive (`op` none, `at` the crash point it
    /// passed last).
    /// `exited` when nobody killed it: its process exited by itself (an external worker).
    Crash {
        t_ms: u64,
        worker: String,
        at: Option<CrashPoint>,
        op: Option<String>,
        graceful: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        exited: Option<Exited>,
    },
    /// A crashed worker was restarted with fresh software.
    Restart { t_ms: u64, worker: String },
    /// The nemesis did something to the world (expiry, replay, clock, …).
    Fault { t_ms: u64, fault: FaultEvent, facts: Vec<Fact> },
    /// A worker explained a decision (duplicate skipped, parked, …).
    Note { t_ms: u64, worker: String, text: String },
}

/// How a worker's process exited by itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Exited {
    /// Its exit status as the OS gave it: `exit status: 1`, `signal: 6 (SIGABRT) (core dumped)`.
    pub how: String,
    /// The last lines of its log (stdout and stderr). Not compared between runs: a log may
    /// carry times and ids of its own.
    #[serde(skip)]
    pub log_tail: String,
}

/// The role a worker of the history plays: its rank in the workload's role list (the order of
/// lanes in a timeline) and its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WorkerRole {
    /// Index of its role in [`crate::workload::Workload::roles`].
    pub rank: usize,
    /// What the role does.
    #[serde(skip)]
    pub kind: crate::spec::RoleKind,
}

/// The ordered history of one schedule.
#[derive(Debug, Clone, Default, Serialize)]
pub struct History {
    /// Entries in the order they happened.
    pub entries: Vec<Entry>,
    /// The role of each worker, by name.
    pub roles: std::collections::BTreeMap<String, WorkerRole>,
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
