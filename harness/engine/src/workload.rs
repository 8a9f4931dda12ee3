//! The seam between the engine and a system under test: a [`Workload`] declares everything the
//! engine needs to know about one message-driven system, and nothing else crosses it.
//!
//! The engine never names a workload's tables, queues or calls. It knows queues, roles, crash
//! points and faults only as the labels a workload declares here, events only as JSON bodies
//! with a stable identity, and the final state only through the workload's
//! [`Invariant`](crate::checker::Invariant)s. This follows Jepsen's test map (db, client,
//! generator, nemesis, checker as separate values) and TigerBeetle's simulator, which is
//! generic over the state machine it tests.
//!
//! A workload is registered with the CLI ([`crate::cli::main`]) or handed to the library
//! functions ([`crate::scenario::discover`]). Its scenarios live in `scenarios/<workload>/`, or
//! anywhere with `workload = "<name>"` in the file.

use std::any::Any;
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;

use uuid::Uuid;

use crate::checker::Invariant;
use crate::sim::names::Names;
use crate::sut::System;

/// A crash point: a named place in worker code between two service calls, declared by the
/// workload (e.g. `after_commit`), used in schedules (`c1:crash@after_commit`) and traces.
pub type CrashPoint = &'static str;

/// One SQS queue of the workload. The engine creates it fresh for every schedule
/// (`<namespace>-<name>`), with a real visibility timeout of 3600 s: only the logical clock
/// expires messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpec {
    /// Its name within the workload, e.g. `payments`; handlers receive from it by this name.
    pub name: &'static str,
    /// Label prefix of its messages in traces, e.g. `m` gives `m1`, `m2`.
    pub label: &'static str,
    /// Visibility timeout, logical s (AWS default 30 s; seed 000 configures 120). A scenario's
    /// `[config] visibility_timeout_s` overrides it for every queue.
    pub visibility_timeout_s: u64,
}

/// What a role does, which decides how the engine runs and drains its workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleKind {
    /// Dispatches the scenario's events, in order, then waits for `dispatch:<event>`
    /// ([`crate::sut::Producer`]). At most one producer worker per scenario is used.
    Producer,
    /// Receives from `queue` and handles each delivery ([`crate::sut::Handler`]): the
    /// Messenger worker loop.
    Handler {
        /// The queue's [`QueueSpec::name`].
        queue: &'static str,
    },
    /// Polls PostgreSQL in cycles ([`crate::sut::Poller`]), e.g. an outbox relay; the drain
    /// polls it again after a transaction ended.
    Poller,
    /// A periodic job ([`crate::sut::Poller`]), e.g. dedup retention: it runs when a schedule
    /// steps it and once after each clock jump of the drain; it is never crashed.
    Periodic,
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
}

/// A message a workload fault sends again (to the queue [`Workload::identity`] names).
#[derive(Debug, Clone)]
pub struct Resend {
    /// The body to send.
    pub body: serde_json::Value,
    /// Why it was where it was (e.g. the reason it had been parked), for the trace.
    pub reason: String,
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

/// A system under test of the workload, by name, with one line saying what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemInfo {
    /// `reference`, or a mutant's name.
    pub name: &'static str,
    /// What it gets right, or wrong.
    pub about: &'static str,
}

/// Everything the engine needs to know about one message-driven system under test.
///
/// Adding a workload is one crate implementing this trait and one folder of scenarios; the
/// engine is not edited.
pub trait Workload: Send + Sync + 'static {
    /// Its name, e.g. `payout`: the scenario directory and `workload = "…"` in scenario files.
    fn name(&self) -> &'static str;

    /// One line for `crashpoint list`, with the seed article it comes from.
    fn about(&self) -> &'static str;

    /// Its queues.
    fn queues(&self) -> Vec<QueueSpec>;

    /// Its roles. Worker names in scenarios must match one of their prefixes.
    fn roles(&self) -> Vec<RoleSpec>;

    /// Its handler policy from a scenario's `[config]` table (retries, TTLs, batch sizes; never
    /// queue settings), handed to handlers through [`crate::sim::cx::Cx::config`].
    /// Errors: a field that is unknown or of the wrong type, named. The default has no policy:
    /// it accepts only an empty table and gives `()`.
    fn config(&self, table: toml::Table) -> Result<Rc<dyn Any>, String> {
        match table.keys().next() {
            None => Ok(Rc::new(())),
            Some(k) => Err(format!("unknown field `{k}`: workload `{}` has no handler settings", self.name())),
        }
    }

    /// The events of a scenario's `[[events]]` tables, in dispatch order, with ids derived from
    /// their labels inside `namespace` ([`derive_id`]). Every id it creates is given a label in
    /// `names`, so that traces never show a random id. Errors: a table without the fields the
    /// workload needs, as `events[i] (<name>): expected …`.
    fn events(&self, specs: &[toml::Table], namespace: Uuid, names: &mut Names) -> Result<Vec<Event>, String>;

    /// The queue a message body belongs to and its message identity (the idempotency key in the
    /// body), or `None` when the body has none.
    fn identity(&self, body: &serde_json::Value) -> Option<(&'static str, Uuid)>;

    /// Work that is still pending in PostgreSQL when the queues are empty (default: none).
    fn leftovers(&self) -> Vec<Leftover> {
        Vec::new()
    }

    /// Its invariants, checked after every schedule in this order. The engine appends
    /// [`crate::checker::Quiescence`] when the list has no invariant of that name.
    fn invariants(&self) -> Vec<Box<dyn Invariant>>;

    /// Its own faults (schedule text, strategy, application); default none.
    fn faults(&self) -> Vec<Box<dyn WorkloadFault>> {
        Vec::new()
    }

    /// Its systems: `reference` first, then the mutants of its catalogue.
    fn systems(&self) -> Vec<SystemInfo>;

    /// The system named `name` (see [`Workload::systems`]), or `None`.
    fn system(&self, name: &str) -> Option<Rc<dyn System>>;

    /// The exploration scenario its catalogue runs (`crashpoint catalogue <workload>`), e.g.
    /// `payout/catalogue`.
    fn catalogue_scenario(&self) -> String {
        format!("{}/explore", self.name())
    }
}

impl fmt::Debug for dyn Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Workload({})", self.name())
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

/// The workloads a binary knows, in registration order (the first is the default for scenario
/// files that name none and sit in no workload's directory).
#[derive(Clone, Default)]
pub struct Registry {
    workloads: Vec<Arc<dyn Workload>>,
}

impl Registry {
    /// A registry of `workloads`, the first being the default.
    pub fn new(workloads: Vec<Arc<dyn Workload>>) -> Registry {
        Registry { workloads }
    }

    /// The workload named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Workload>> {
        self.workloads.iter().find(|w| w.name() == name).cloned()
    }

    /// The default workload (the first registered), if any.
    pub fn default_workload(&self) -> Option<Arc<dyn Workload>> {
        self.workloads.first().cloned()
    }

    /// Every workload, in registration order.
    pub fn all(&self) -> &[Arc<dyn Workload>] {
        &self.workloads
    }

    /// Their names, for error messages.
    pub fn names(&self) -> Vec<&'static str> {
        self.workloads.iter().map(|w| w.name()).collect()
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

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
