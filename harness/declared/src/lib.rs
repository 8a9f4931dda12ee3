//! Workloads declared in a file: a team that writes no Rust tests its own service (any
//! language, its own schema, message bodies, invariants and known-bad variants) with the stock
//! `crashpoint` binary.
//!
//! Every `*.workload.toml` under the scenarios directory is a workload ([`discover`]). Its
//! scenarios are the files of `scenarios/<name>/` (or any scenario with `workload = "<name>"`),
//! and it is the same thing to the engine as a compiled one: [`Declared`] implements
//! [`crashpoint::Workload`] from the file, so exploration, shrinking, `repro`, the catalogue,
//! `list`, reports and `--jobs` work unchanged.
//!
//! ```toml
//! name = "invoices"                                  # the scenario directory scenarios/invoices/
//! about = "OrderCompleted -> one invoice per order"  # one line for `crashpoint list`
//! schema = ["schema.sql"]                            # DDL run in every schedule's fresh schema
//! catalogue = "invoices/explore"                     # the catalogue's scenario (default <name>/explore)
//!
//! [[queues]]                                         # zero or more SQS queues
//! name = "orders"
//! label = "m"                                        # messages m1, m2, … in traces (default "m")
//! visibility_timeout_s = 30                          # logical s (default 30)
//! # retention_s = 345600  fifo = false  dead_letter = { queue = "orders-dlq", max_receive_count = 3 }
//!
//! [events]                                           # how a scenario's [[events]] become messages
//! queue = "orders"                                   # the built-in producer sends each body there;
//! # insert = "INSERT INTO jobs (body) VALUES ($1)"   # or, for a table queue, runs this ($1 jsonb body, $2 uuid identity)
//! identity = "/eventId"                              # JSON pointer to the stable operation identity
//! body = { eventId = "{{id}}", orderId = "{{uuid order}}", amountMinor = "{{amount}}" }
//! defaults = { amount = 1000 }                       # fields an [[events]] table may leave out
//!
//! [roles.p]
//! builtin = "producer"                               # dispatches the events; stands at after_send
//!
//! [roles.c]                                          # the team's own process
//! handles = "orders"                                 # a handler of that queue; or kind = "poller" / "periodic"
//! command = ["node", "worker.js"]                    # run in the directory that holds scenarios/
//! setup = ["npm", "ci"]                              # once per crashpoint run, before the first schedule
//! points = ["after_recv", "after_claim", "after_commit"]   # crash points: after_<call label>
//! labels = { claim = "INSERT INTO inbox" }           # call labels by wire predicate
//! # poll = "claim"   env = { … }   pass = ["SELECT version()"]   step_timeout_s = 10
//!
//! [[pending]]                                        # work still in flight in tables, for the drain
//! what = "job(s) not done"
//! count_sql = "SELECT count(*) FROM jobs"
//! due_sql = "SELECT min(delivered_at) + interval '60 s' FROM jobs WHERE delivered_at IS NOT NULL"
//!
//! [[providers]]                                      # the team's HTTP API dependencies ([`providers`])
//! name = "cards"                                     # its URL in url_env; faults net:…@cards
//! url_env = "CARDS_API_BASE"
//! routes = [{ label = "charge", method = "POST", path = "/v1/charges", effect = "apply", response = { status = 200, body = { id = "{{new ch_}}" } } }]
//!
//! [[invariants]]                                     # SQL returning the violating rows
//! name = "one invoice per order"
//! sql = "SELECT order_id FROM invoice GROUP BY order_id HAVING count(*) > 1"
//!
//! [systems.reference]
//! about = "inbox claim in the invoice's transaction"
//! [systems.ack-before-commit]                        # a variant: the same command with these
//! about = "deletes the message before COMMIT"
//! env = { VARIANT = "ack-before-commit" }            # args = [...] are appended to the command
//! [systems.check-then-insert]
//! schema = ["schema-no-unique.sql"]                  # a variant's own schema, said explicitly
//! ```
//!
//! What the engine adds for a declared workload:
//! - PostgreSQL's `now()` (and `transaction_timestamp()`, `statement_timestamp()`,
//!   `clock_timestamp()`) follows the logical clock in the schedule's schema, for every
//!   connection and the DDL's defaults ([`crashpoint::SqlClock::Everywhere`]);
//!   `CURRENT_TIMESTAMP` and `LOCALTIMESTAMP` are keywords and stay wall time.
//! - The tables `crashpoint_dispatched`, `crashpoint_messages` and
//!   `crashpoint_provider_calls`, filled before the invariants run ([`crashpoint::facts`]), so that an invariant can say "every
//!   dispatched event has its effect".
//! - The engine's own invariants (quiescence, nothing expired, locks released by their
//!   holders, failed acknowledgements handled, …), as for every workload.
//! - `CRASHPOINT_SYSTEM` in each process's environment names the system being run.

mod file;
mod init;
mod providers;
mod system;
mod template;

use std::any::Any;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use anyhow::Result;
use uuid::Uuid;

use crashpoint::External;
use crashpoint::Invariant;
use crashpoint::{derive_id, Event, Labels, Leftover, QueueSpec, RoleSpec, SystemInfo, Workload};

use file::Dispatch;
pub use init::Files;

/// A workload read from a `*.workload.toml` file ([`Declared::load`]).
#[derive(Debug, Clone)]
pub struct Declared {
    decl: file::Decl,
}

impl Declared {
    /// Reads and checks the workload file `path`. `root` is the directory that holds
    /// `scenarios/`: the file's paths (schema files, commands) are relative to it, and its
    /// worker processes run there. Errors name the file, the line and the field, and say what
    /// was expected.
    pub fn load(path: &Path, root: &Path) -> Result<Declared> {
        Ok(Declared { decl: file::read(path, root)? })
    }
}

/// Every workload file (`*.workload.toml`, [`crashpoint::files::WORKLOAD_FILE_SUFFIX`])
/// under `scenarios`, sorted by path, read with the directory that holds `scenarios` as their
/// root. A missing directory has none. Errors: the first file that does not read, named.
pub fn discover(scenarios: &Path) -> Result<Vec<Arc<dyn Workload>>> {
    let mut files = Vec::new();
    if scenarios.is_dir() {
        collect(scenarios, &mut files).map_err(|e| anyhow::anyhow!("reading {}: {e}", scenarios.display()))?;
    }
    files.sort();
    let root =
        scenarios.canonicalize().ok().and_then(|r| r.parent().map(Path::to_path_buf)).unwrap_or_else(|| ".".into());
    files.iter().map(|f| Ok(Arc::new(Declared::load(f, &root)?) as Arc<dyn Workload>)).collect()
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            collect(&p, out)?;
        } else if crashpoint::files::is_workload_file(&p) {
            out.push(p);
        }
    }
    Ok(())
}

impl Workload for Declared {
    fn name(&self) -> &'static str {
        self.decl.name
    }

    fn about(&self) -> &'static str {
        self.decl.about
    }

    fn queues(&self) -> Vec<QueueSpec> {
        self.decl.queues.clone()
    }

    fn roles(&self) -> Vec<RoleSpec> {
        self.decl.roles.clone()
    }

    /// Any `[config]` table: it reaches the workers as `CRASHPOINT_CONFIG` (JSON).
    fn config(&self, _table: toml::Table) -> Result<Rc<dyn Any>, String> {
        Ok(Rc::new(()))
    }

    fn events(&self, specs: &[toml::Table], namespace: Uuid, names: &mut Labels) -> Result<Vec<Event>, String> {
        specs
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let label = t.get("name").and_then(|v| v.as_str()).unwrap_or("?").to_string();
                let identity = derive_id(namespace, "event", &label);
                names.set(identity, &label);
                let body = self
                    .decl
                    .template
                    .render(&label, identity, t, namespace, names)
                    .map_err(|e| format!("events[{i}] ({label}): {e}"))?;
                Ok(Event { label, identity, body })
            })
            .collect()
    }

    fn identity(&self, body: &serde_json::Value) -> Option<(&'static str, Uuid)> {
        let queue = match self.decl.dispatch {
            Dispatch::Queue(q) => q,
            Dispatch::Insert(_) => return None,
        };
        let id = body.pointer(&self.decl.identity)?.as_str()?.parse().ok()?;
        Some((queue, id))
    }

    /// Its `[[providers]]`, fresh for one schedule, each the engine's model of an idempotent
    /// API ([`crashpoint::http_api::Api`]): served to the team's processes at the wire.
    fn providers(&self) -> Vec<Rc<dyn crashpoint::Provider>> {
        self.decl
            .providers
            .iter()
            .map(|s| Rc::new(crashpoint::http_api::Api::new(s.clone())) as Rc<dyn crashpoint::Provider>)
            .collect()
    }

    fn leftovers(&self) -> Vec<Leftover> {
        self.decl.leftovers.clone()
    }

    fn invariants(&self) -> Vec<Box<dyn Invariant>> {
        self.decl.invariants.iter().cloned().map(|i| Box::new(i) as Box<dyn Invariant>).collect()
    }

    fn systems(&self) -> Vec<SystemInfo> {
        self.decl.systems.iter().map(|s| SystemInfo { name: s.name, about: s.about, must_pass: s.must_pass }).collect()
    }

    fn system(&self, name: &str) -> Option<Rc<dyn crashpoint::System>> {
        let s = self.decl.systems.iter().find(|s| s.name == name)?;
        Some(Rc::new(system::DeclaredSystem::new(s, self.decl.producer, self.decl.dispatch.clone())))
    }

    fn catalogue_scenario(&self) -> String {
        self.decl.catalogue.clone().unwrap_or_else(|| format!("{}/explore", self.decl.name))
    }

    fn external(&self) -> Vec<Arc<External>> {
        self.decl.external.clone()
    }

    fn logical_now(&self) -> bool {
        true
    }

    fn history_tables(&self) -> bool {
        true
    }
}
