//! The seam between the engine and a system under test: a [`Workload`] declares everything the
//! engine needs to know about one message-driven system, and nothing else crosses it.
//!
//! The engine never names a workload's tables, queues or calls. It knows queues, roles, crash
//! points and faults only as the labels a workload declares here, events only as JSON bodies
//! with a stable identity, and the final state only through the workload's
//! [`Invariant`]s. This follows Jepsen's test map (db, client,
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
use crate::sim::cx::System;
use crate::record::labels::Labels;
use crate::spec::{Event, Leftover, QueueSpec, RoleSpec, SystemInfo, WorkloadFault};

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
    fn events(&self, specs: &[toml::Table], namespace: Uuid, names: &mut Labels) -> Result<Vec<Event>, String>;

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

    /// Its external providers (`crate::provider`), fresh for one schedule: each runs as a
    /// turmoil host of that name, and keeps the ledger the checker reads. Default: none.
    fn providers(&self) -> Vec<Rc<dyn crate::provider::Provider>> {
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

    /// The exploration scenario on which the catalogue explores mutant `system` (default
    /// [`Workload::catalogue_scenario`]): a mutant whose failure window needs settings of its
    /// own (batches, graceful stops on the menu) names a scenario that has them. The reference
    /// is explored on every scenario the catalogue uses.
    fn catalogue_scenario_of(&self, _system: &str) -> String {
        self.catalogue_scenario()
    }

    /// Roles played by the team's own processes, gated at the wire (`crate::sim::wire`), as
    /// a scenario's `[external.<role>]` declares them; a scenario's own table for a role wins.
    /// Default: none, every role is a [`crate::sim::cx::Program`] of the system.
    fn external(&self) -> Vec<Arc<crate::sim::wire::External>> {
        Vec::new()
    }

    /// Whether PostgreSQL's `now()`, `transaction_timestamp()`, `statement_timestamp()` and
    /// `clock_timestamp()` follow the schedule's logical clock in its schema, for the DDL's
    /// defaults and every connection, as `crashpoint_now()` does
    /// ([`crate::namespace::admin::SqlClock::Everywhere`]). Default `false`: `now()` is wall time.
    fn logical_now(&self) -> bool {
        false
    }

    /// Whether the schedule's schema holds the engine's facts as tables for SQL invariants
    /// (`crate::checker::facts`): the engine creates them before the system's DDL and fills
    /// them after the drain, before any invariant is checked. Default `false`.
    fn history_tables(&self) -> bool {
        false
    }
}

impl crate::schedule::Vocabulary {
    /// The vocabulary of `workload`: its roles and its own faults' names.
    pub fn of(workload: &dyn Workload) -> crate::schedule::Vocabulary {
        crate::schedule::Vocabulary {
            roles: workload.roles(),
            faults: workload.faults().iter().map(|f| f.name()).collect(),
            providers: workload.providers().iter().map(|p| p.name()).collect(),
            webhooks: workload.providers().iter().filter(|p| !p.webhooks().is_empty()).map(|p| p.name()).collect(),
            routes: workload.providers().iter().flat_map(|p| p.route_labels().into_iter().map(|(l, a)| (p.name(), l, a))).collect(),
        }
    }
}

impl fmt::Debug for dyn Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Workload({})", self.name())
    }
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

    /// This registry with `more` after its workloads. Errors: a name registered twice.
    pub fn with(mut self, more: Vec<Arc<dyn Workload>>) -> anyhow::Result<Registry> {
        for w in more {
            if self.get(w.name()).is_some() {
                anyhow::bail!("workload `{}` is declared twice (a workload file may not reuse the name of another workload: {})", w.name(), self.names().join(", "));
            }
            self.workloads.push(w);
        }
        Ok(self)
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
