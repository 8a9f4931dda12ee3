//! What a workload declares, as plain data: its queues, roles and crash points, its events,
//! the work it may leave pending. The simulation and the history use these; the [`Workload`]
//! trait that hands them to the engine is in [`crate::workload`].
//!
//! [`Workload`]: crate::workload::Workload

use uuid::Uuid;

/// A crash point: a named place in worker code between two service calls, declared by the
/// workload (e.g. `after_commit`), used in schedules (`c1:crash@after_commit`) and traces.
/// Every call boundary is one too, declared or not ([`after_call`]).
pub type CrashPoint = &'static str;

/// The crash point at the boundary after a call labelled `label`: `after_<label>`
/// (`after_commit`, `after_insert_outbox`). Every call a worker makes has one, with no
/// declaration: `crash@after_<label>` kills the worker once that call completed and before
/// its next, `fail@after_<label>` replaces its next call with an injected failure. A declared
/// crash point of the same name is the same place when the code marks it right after the call.
pub fn after_call(label: &str) -> CrashPoint {
    intern(&format!("{AFTER_CALL_PREFIX}{label}"))
}

/// The prefix of a call boundary's name ([`after_call`]).
pub const AFTER_CALL_PREFIX: &str = "after_";

/// Whether `cp` is the call boundary after a call labelled `label`.
pub fn is_after_call(cp: &str, label: &str) -> bool {
    cp.strip_prefix(AFTER_CALL_PREFIX) == Some(label)
}

/// `s` as a `&'static str`, allocated once per distinct text: crash point names read from a
/// schedule's text or made from call labels. The set is bounded by the labels a workload uses.
pub fn intern(s: &str) -> &'static str {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static TABLE: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut t = TABLE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = t.get(s) {
        return s;
    }
    let leaked: &'static str = Box::leak(s.to_string().into_boxed_str());
    t.insert(leaked);
    leaked
}

/// SQS's default message retention period: 4 days, in s (`MessageRetentionPeriod`, 60 s to
/// 1,209,600 s = 14 days; AWS SQS Developer Guide, "Amazon SQS queue types" and
/// `SetQueueAttributes`).
pub const DEFAULT_RETENTION_S: u64 = 345_600;

/// One SQS queue of the workload. The engine creates it fresh for every schedule
/// (`<namespace>-<name>`), with a real visibility timeout of 3600 s and the real retention at
/// its 14-day maximum: only the logical clock expires messages and deletes them unprocessed.
///
/// Build it with [`QueueSpec::new`]: the struct is `#[non_exhaustive]`, so that a field added
/// later (as `retention_s` was) does not break a team's workload crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueSpec {
    /// Its name within the workload, e.g. `payments`; handlers receive from it by this name.
    pub name: &'static str,
    /// Label prefix of its messages in traces, e.g. `m` gives `m1`, `m2`.
    pub label: &'static str,
    /// Visibility timeout, logical s (AWS default 30 s; the payout article configures 120). A scenario's
    /// `[config] visibility_timeout_s` overrides it for every queue.
    pub visibility_timeout_s: u64,
    /// Message retention, logical s ([`DEFAULT_RETENTION_S`] unless the system sets its
    /// queue's `MessageRetentionPeriod`). When the logical clock passes a message's enqueue
    /// time plus this, the harness deletes it, as SQS does, whether or not anyone processed it.
    pub retention_s: u64,
    /// A FIFO queue (`<namespace>-<name>.fifo`, `FifoQueue=true`, no content-based
    /// deduplication): every send carries a `MessageGroupId` and a `MessageDeduplicationId`
    /// (`crate::sim::fifo`), a send whose identity was accepted less than 5 logical minutes
    /// ago is accepted but not delivered, and a group's messages are delivered in order, one
    /// in flight at a time (AWS SQS Developer Guide, "Amazon SQS FIFO queues"). A scenario's
    /// `[config] fifo_queues = ["<name>"]` sets it.
    pub fifo: bool,
    /// Its dead-letter queue, if it has one ([`DeadLetter`]). A scenario's
    /// `[config] dead_letter = { queue = "<name>", max_receive_count = n }` sets it.
    pub dead_letter: Option<DeadLetter>,
    /// An outbound queue: the system only publishes to it, and another team's service consumes
    /// it. The drain does not wait for it to empty, quiescence does not count its messages and
    /// its retention deletes nothing; what was published stays in the history (and in
    /// `crashpoint_messages` for SQL invariants). The harness empties it between schedules.
    pub outbound: bool,
}

/// A source queue's redrive policy (`RedrivePolicy`: `deadLetterTargetArn`,
/// `maxReceiveCount`), emulated in logical time: a message received `max_receive_count` times
/// and visible again is moved to `queue` by the harness just before the next receive from its
/// source queue, as SQS moves it at that receive instead of delivering it (AWS SQS Developer
/// Guide, "Using dead-letter queues"). On a
/// standard queue the moved message keeps its MessageId and its enqueue time, so its retention
/// on the dead-letter queue counts from its first enqueue on the source queue ("Setting-up
/// dead-letter queue retention"). The real queues get no RedrivePolicy: only the logical clock
/// moves messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetter {
    /// The dead-letter queue's [`QueueSpec::name`].
    pub queue: &'static str,
    /// Receives after which a message is moved (SQS accepts 1 to 1000).
    pub max_receive_count: u32,
}

impl QueueSpec {
    /// Queue `name` with message label prefix `label`, SQS's defaults: a 30 s visibility
    /// timeout and a 4-day retention ([`DEFAULT_RETENTION_S`]), both logical.
    pub const fn new(name: &'static str, label: &'static str) -> QueueSpec {
        QueueSpec { name, label, visibility_timeout_s: 30, retention_s: DEFAULT_RETENTION_S, fifo: false, dead_letter: None, outbound: false }
    }

    /// The same queue as an outbound one ([`QueueSpec::outbound`]): consumed elsewhere.
    pub const fn outbound(mut self) -> QueueSpec {
        self.outbound = true;
        self
    }

    /// The same queue with a visibility timeout of `s` logical seconds.
    pub const fn visibility_timeout_s(mut self, s: u64) -> QueueSpec {
        self.visibility_timeout_s = s;
        self
    }

    /// The same queue with a message retention of `s` logical seconds (SQS accepts 60 to
    /// 1,209,600).
    pub const fn retention_s(mut self, s: u64) -> QueueSpec {
        self.retention_s = s;
        self
    }

    /// The same queue as a FIFO queue ([`QueueSpec::fifo`]).
    pub const fn fifo(mut self) -> QueueSpec {
        self.fifo = true;
        self
    }

    /// The same queue with dead-letter queue `queue` after `max_receive_count` receives
    /// ([`DeadLetter`]).
    pub const fn dead_letter(mut self, queue: &'static str, max_receive_count: u32) -> QueueSpec {
        self.dead_letter = Some(DeadLetter { queue, max_receive_count });
        self
    }

    /// Its SQS name in namespace `ns`: `<ns>-<name>`, with `.fifo` at the end of a FIFO queue's
    /// (SQS requires it; at most 80 characters).
    pub fn sqs_name(&self, ns: &str) -> String {
        format!("{}-{}{}", ns.replace('_', "-"), self.name, if self.fifo { ".fifo" } else { "" })
    }
}

/// What a role does, which decides how the engine runs and drains its workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleKind {
    /// Dispatches the scenario's events, in order, then waits for `dispatch:<event>`
    /// ([`crate::sim::cx::Producer`]). At most one producer worker per scenario is used.
    Producer,
    /// Receives from `queue` and handles each delivery ([`crate::sim::cx::Handler`]): the
    /// Messenger worker loop.
    Handler {
        /// The queue's [`QueueSpec::name`].
        queue: &'static str,
    },
    /// Polls PostgreSQL in cycles ([`crate::sim::cx::Poller`]), e.g. an outbox relay; the drain
    /// polls it again after a transaction ended.
    Poller,
    /// A periodic job ([`crate::sim::cx::Poller`]), e.g. dedup retention: it runs when a schedule
    /// steps it and once after each clock jump of the drain; it is never crashed.
    Periodic,
    /// Serves the HTTP endpoint a provider calls back (a webhook,
    /// [`crate::provider::api::Webhook`]): a team's process whose cycle starts at a delivery
    /// ([`crate::sim::net::webhook`]); the drain delivers while events are pending.
    Endpoint,
}

/// A role of the workload: the workers named `<prefix>` or `<prefix><n>` (`c1`, `c2`) play it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleSpec {
    /// Worker name prefix, lower-case letters, e.g. `c`, `r`, `ret`.
    pub prefix: &'static str,
    /// What the role does.
    pub kind: RoleKind,
    /// The crash points its workers stand at, in pipeline order.
    pub points: &'static [CrashPoint],
    /// One line for `crashpoint list`, e.g. `payout consumer`.
    pub about: &'static str,
}

/// One event a scenario dispatches: its label (`e1`), its stable identity (the idempotency key,
/// derived from the label inside a per-schedule namespace) and the JSON body the producer
/// publishes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Event {
    /// The label of the scenario file's `[[events]] name`.
    pub label: String,
    /// The message identity (e.g. `event_id`).
    pub identity: Uuid,
    /// The event, as the workload's producer reads it.
    pub body: serde_json::Value,
}

impl Event {
    /// The body as the workload's event type. Errors: the body does not have that shape.
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_value(self.body.clone())
    }
}

/// The UUID of a label: `v5(namespace, "<kind>/<label>")`. The namespace is fresh for every
/// schedule, so that concurrent runs never share a Redis key, and the same label always gets
/// the same id within one schedule.
pub fn derive_id(namespace: Uuid, kind: &str, label: &str) -> Uuid {
    Uuid::new_v5(&namespace, format!("{kind}/{label}").as_bytes())
}

/// The `[[events]]` tables as the workload's own spec type `T` (a serde struct, usually with
/// `deny_unknown_fields`). Errors: `events[i] (<name>): <what serde expected>`.
pub fn event_specs<T: serde::de::DeserializeOwned>(specs: &[toml::Table]) -> Result<Vec<T>, String> {
    specs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let label = t.get("name").and_then(|v| v.as_str()).unwrap_or("?");
            toml::Value::Table(t.clone())
                .try_into()
                .map_err(|e: toml::de::Error| format!("events[{i}] ({label}): {}", e.message()))
        })
        .collect()
}

/// A count of work still pending in PostgreSQL, for the drain's quiescence probe: quiescent
/// means every queue empty (confirmed by SQS) and every `count_sql` returning 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// What is counted, for the trace: `unpublished outbox row(s)`.
    pub what: &'static str,
    /// `SELECT count(*) …` (one `bigint`), run in the schedule's schema.
    pub count_sql: &'static str,
    /// When that work becomes due, if it waits for time (a claim's lease):
    /// `SELECT min(<timestamptz>) …` (one `timestamptz`, NULL when nothing waits), in logical
    /// time (`crate::duration::epoch`). The drain jumps the logical clock there when nothing
    /// else moves. `None` for work that waits for no time.
    pub due_sql: Option<&'static str>,
}

/// A message a workload fault sends again (to the queue [`crate::workload::Workload::identity`] names).
#[derive(Debug, Clone)]
pub struct Resend {
    /// The body to send.
    pub body: serde_json::Value,
    /// Why it was where it was (e.g. the reason it had been parked), for the trace.
    pub reason: String,
}

/// A system under test of the workload, by name, with one line saying what it is and whether
/// the catalogue must find it correct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemInfo {
    /// `reference`, or a variant's name.
    pub name: &'static str,
    /// What it gets right, or wrong.
    pub about: &'static str,
    /// `true` for the reference and a harmless variant (one that differs from the reference
    /// and is still correct): `crashpoint catalogue` fails when it catches one, a false alarm.
    /// `false` for a mutant, which the catalogue fails to miss.
    pub must_pass: bool,
}

impl SystemInfo {
    /// The reference system: correct, named `reference`.
    pub const fn reference(about: &'static str) -> SystemInfo {
        SystemInfo { name: "reference", about, must_pass: true }
    }

    /// A mutant: a known-bad variant the catalogue must catch.
    pub const fn mutant(name: &'static str, about: &'static str) -> SystemInfo {
        SystemInfo { name, about, must_pass: false }
    }

    /// A harmless variant: it differs from the reference and is correct (for example a
    /// consumer that looks its inbox up before it claims, which the unique claim still
    /// guards); the catalogue must not catch it.
    pub const fn harmless(name: &'static str, about: &'static str) -> SystemInfo {
        SystemInfo { name, about, must_pass: true }
    }
}

/// The role a worker name plays: `c1` plays the role with prefix `c`, `ret` the one with prefix
/// `ret`. `None` when no role matches.
pub fn role_of<'r>(roles: &'r [RoleSpec], worker: &str) -> Option<&'r RoleSpec> {
    let split = worker.find(|c: char| c.is_ascii_digit()).unwrap_or(worker.len());
    let (head, tail) = worker.split_at(split);
    if !tail.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    roles.iter().find(|r| r.prefix == head)
}

/// A fault of the workload's own, applied by the nemesis when a schedule names it (e.g.
/// `replay`, Messenger's `messenger:failed:retry`): it reads or changes the workload's tables
/// through the admin connection and returns the messages to send again.
#[async_trait::async_trait(?Send)]
pub trait WorkloadFault {
    /// Its schedule text: lower-case letters and `-`, e.g. `replay`.
    fn name(&self) -> &'static str;
    /// One line for `crashpoint list`.
    fn about(&self) -> &'static str;
    /// Applies it in the schedule's schema. Errors: PostgreSQL errors (a harness error, exit 2).
    async fn apply(&self, pg: &sqlx::PgPool) -> anyhow::Result<Vec<Resend>>;
    /// The trace line for one message sent again; `who` is the identity's label, `msg` the
    /// new message's.
    fn announce(&self, who: &str, msg: &str, resend: &Resend) -> String {
        format!("{}: {who} sent again as {msg} ({})", self.name(), resend.reason)
    }
    /// The trace line when there was nothing to send.
    fn announce_nothing(&self) -> String {
        format!("{}: nothing to send", self.name())
    }
}
/// The message identity of a body and the queue it belongs to (see
/// [`crate::workload::Workload::identity`]); what the scheduler needs to send a message again.
pub type IdentityFn = Box<dyn Fn(&serde_json::Value) -> Option<(&'static str, Uuid)>>;

#[cfg(test)]
mod tests {
    use super::*;

    const ROLES: &[RoleSpec] = &[
        RoleSpec { prefix: "c", kind: RoleKind::Handler { queue: "q" }, points: &[], about: "" },
        RoleSpec { prefix: "ret", kind: RoleKind::Periodic, points: &[], about: "" },
    ];

    #[test]
    fn worker_names_match_role_prefixes() {
        assert_eq!(role_of(ROLES, "c12").map(|r| r.prefix), Some("c"));
        assert_eq!(role_of(ROLES, "ret").map(|r| r.prefix), Some("ret"));
        assert_eq!(role_of(ROLES, "r1"), None);
        assert_eq!(role_of(ROLES, "c1x"), None);
    }
}
