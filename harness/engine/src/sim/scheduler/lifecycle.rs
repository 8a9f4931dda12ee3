//! A schedule's lifecycle: [`Run::start`] takes the namespace from the pool, builds the
//! hosts' [`HostSpec`], the fleet and the shelves of kept connections and processes, and
//! settles the first yield points; [`Run::finish`] collects the shelves, drops the hosts and
//! hands the namespace's admin connections, the history and the providers' ledgers over
//! ([`Finished`]). What happens in between is [`super::Run`]'s.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::{drain, Run, CALL_TIMEOUT_S};
use crate::services::Endpoints;
use crate::namespace::admin::{Admin, SqlClock};
use crate::sim::clock::Clock;
use crate::sim::cx::System;
use crate::sim::fleet;
use crate::record::history::{CallCounts, History, WorkerRole};
use crate::sim::host_spec::HostSpec;
use crate::record::labels::Labels;
use crate::sim::world::World;
use crate::spec::{role_of, CrashPoint, Event, IdentityFn, Leftover, QueueSpec, RoleSpec, WorkloadFault};

/// What a schedule runs against.
pub struct Setup {
    /// Where the services are, every SQS endpoint of them: the namespace picks one
    /// ([`crate::namespace::pool::take`]).
    pub endpoints: Endpoints,
    /// The workload's roles.
    pub roles: Vec<RoleSpec>,
    /// The workload's message identity of a body ([`crate::workload::Workload::identity`]).
    pub identity: IdentityFn,
    /// The workload's own faults.
    pub faults: Vec<Box<dyn WorkloadFault>>,
    /// The workload's pending-work counts for the quiescence probe.
    pub leftovers: Vec<Leftover>,
    /// Whether the drain dispatches events that were never sent again ([`System::retries_upstream`]).
    pub retries_upstream: bool,
    /// The system under test.
    pub system: Rc<dyn System>,
    /// Its handler policy ([`crate::workload::Workload::config`]).
    pub config: Rc<dyn std::any::Any>,
    /// The workload's queues, with the scenario's visibility timeouts.
    pub queues: Vec<QueueSpec>,
    /// Worker names, e.g. `p c1 c2 r1 d1 ret`.
    pub workers: Vec<String>,
    /// Events the producer dispatches, in order.
    pub events: Vec<Event>,
    /// Labels for the scenario's ids.
    pub names: Labels,
    /// Roles played by external worker processes ([`crate::sim::wire`]); none for an in-process
    /// fleet.
    pub external: Vec<std::sync::Arc<crate::sim::wire::External>>,
    /// The scenario's `[config]` as JSON, for external workers.
    pub config_json: String,
    /// Whether PostgreSQL's `now()` follows the logical clock in the schedule's schema
    /// ([`crate::workload::Workload::logical_now`], [`SqlClock::Everywhere`]).
    pub logical_now: bool,
    /// DDL run in the schedule's schema before the system's own: the engine's fact tables
    /// ([`crate::workload::Workload::history_tables`]; the scenario runner passes the checker's
    /// DDL), or empty.
    pub prelude_ddl: &'static str,
    /// The workload's providers for this schedule ([`crate::workload::Workload::providers`]).
    pub providers: Vec<Rc<dyn crate::provider::Provider>>,
}

/// A finished schedule: its history and the admin connections, for the checker.
pub struct Finished {
    /// The complete history.
    pub history: History,
    /// Admin connections to the schedule's namespace (destroy them after checking).
    pub admin: Admin,
    /// Real calls made by workers.
    pub calls: CallCounts,
    /// Crash points passed, one entry per pass: the worker and the point.
    pub passed: Vec<(String, CrashPoint)>,
    /// Redis keys the schedule used.
    pub keys: Vec<String>,
    /// Labels of the schedule's ids.
    pub names: Labels,
    /// The effects the providers applied, provider by provider, in order.
    pub effects: Vec<crate::provider::Effect>,
    /// Every request that reached a provider or was lost on its way, in order
    /// ([`crate::sim::net::NetState::calls`]).
    pub provider_calls: Vec<crate::provider::Call>,
    /// Every webhook delivery made, in order ([`crate::sim::net::NetState::deliveries`]).
    pub deliveries: Vec<crate::sim::net::webhook::Delivered>,
    /// Simulation steps the schedule took (each ticks every running host).
    pub steps: u64,
    /// The roles whose processes were kept from the namespace's schedule before
    /// ([`crate::sim::wire::keep`]).
    pub reused: BTreeSet<&'static str>,
}

/// The role of each worker name: its rank among the workload's roles and its kind.
fn worker_roles(
    workers: &[String],
    roles: &[RoleSpec],
) -> std::collections::BTreeMap<String, WorkerRole> {
    workers
        .iter()
        .filter_map(|w| {
            let rank = roles.iter().position(|r| Some(r) == role_of(roles, w))?;
            Some((
                w.clone(),
                WorkerRole {
                    rank,
                    kind: roles[rank].kind,
                },
            ))
        })
        .collect()
}

impl<'a> Run<'a> {
    /// Creates the schedule's namespace, starts one host per worker and waits until every
    /// worker is parked at its first yield point. Errors: services unreachable, the schema
    /// failing, a host failing to connect.
    pub fn start(setup: Setup) -> Result<Run<'a>> {
        let t0 = Instant::now();
        let sql_clock = match (setup.logical_now, setup.external.is_empty()) {
            (true, _) => SqlClock::Everywhere,
            (false, false) => SqlClock::Function,
            (false, true) => SqlClock::Off,
        };
        let ddl = format!("{}{}", setup.prelude_ddl, setup.system.schema_sql());
        let mut admin = crate::namespace::pool::take(&setup.endpoints, &ddl, &setup.queues, sql_clock)?;
        let pg_kept = Rc::new(crate::namespace::worker_pg::Shelf::new(crate::namespace::worker_pg::alive(
            std::mem::take(&mut admin.kept),
        )));
        let kept = std::mem::take(&mut admin.processes).into_iter().filter_map(|p| p.downcast::<crate::sim::wire::keep::Kept>().ok());
        let processes = Rc::new(crate::sim::wire::keep::Shelf::new(kept.map(|k| *k).collect()));
        let identity = Rc::new(setup.identity);
        let step_timeout = setup
            .external
            .iter()
            .map(|e| Duration::from_secs(e.step_timeout_s))
            .min();
        let admin_ms = t0.elapsed().as_secs_f64() * 1e3;
        let world = World::new(&setup.workers, setup.names);
        world.borrow_mut().net.providers = crate::sim::net::Providers(setup.providers.clone());
        world.borrow_mut().to_dispatch = setup.events.iter().cloned().collect();
        let roles = setup.roles.clone();
        let wake = crate::sim::io::Signal::for_this_thread();
        let spec = Rc::new(HostSpec {
            endpoints: admin.endpoints.clone(),
            schema: admin.schema.clone(),
            search_path: admin.sql_clock.search_path(&admin.schema),
            queues: admin.queues.clone(),
            config: setup.config.clone(),
            world: world.clone(),
            system: setup.system.clone(),
            roles: roles.clone(),
            identity: identity.clone(),
            external: setup.external.clone(),
            config_json: setup.config_json.clone(),
            providers: setup.providers.clone(),
            sqs_calls: admin.sqs_calls.clone(),
            pg_kept: pg_kept.clone(),
            processes: processes.clone(),
            wake: wake.clone(),
        });
        let sim = fleet::build(&setup.workers, spec)?;
        let history = History {
            entries: Vec::new(),
            roles: worker_roles(&setup.workers, &roles),
        };
        let visibility_ms = setup
            .queues
            .iter()
            .map(|q| (q.name, q.visibility_timeout_s * 1000))
            .collect();
        // An outbound queue's messages are another service's to process: its retention is not
        // this system's concern.
        let retention_ms = setup
            .queues
            .iter()
            .filter(|q| !q.outbound)
            .map(|q| (q.name, q.retention_s.saturating_mul(1000)))
            .collect();
        let concurrent: Vec<String> = setup
            .workers
            .iter()
            .filter(|w| {
                setup
                    .external
                    .iter()
                    .any(|e| e.concurrent && role_of(&roles, w).is_some_and(|r| r.prefix == e.role))
            })
            .cloned()
            .collect();
        let mut run = Run {
            sim,
            pg_kept,
            processes,
            wake,
            world,
            admin,
            clock: Clock::new(visibility_ms, retention_ms),
            workers: setup.workers,
            roles,
            identity,
            external_roles: setup.external.iter().map(|e| e.role).collect(),
            concurrent,
            quiet: Default::default(),
            step_timeout: step_timeout.unwrap_or(Duration::from_secs(CALL_TIMEOUT_S)),
            faults: setup.faults,
            leftovers: setup.leftovers,
            retries_upstream: setup.retries_upstream,
            events: setup.events,
            keys: BTreeSet::new(),
            history,
            lenient: false,
            polls: drain::Polls::default(),
            redeliveries: Vec::new(),
            providers: setup.providers,
            cuts: Vec::new(),
            steps: 0,
            lagging: BTreeMap::new(),
            dead_letters: setup
                .queues
                .iter()
                .filter_map(|q| Some((q.name, q.dead_letter?)))
                .collect(),
            due_moves: Vec::new(),
        };
        let t1 = Instant::now();
        if let Err(e) = run.settle(None) {
            let Finished { admin, keys, .. } = run.finish();
            crate::namespace::pool::give_back(admin, &keys, false);
            return Err(e);
        }
        run.pg_kept.started();
        tracing::debug!(
            admin_ms,
            hosts_ms = t1.elapsed().as_secs_f64() * 1e3,
            "run started (namespace created; hosts connected)"
        );
        Ok(run)
    }

    /// Stops every host (closing their connections, but for the PostgreSQL ones left idle,
    /// which go to the namespace for its next schedule) and hands over the history and the
    /// admin connections.
    pub fn finish(self) -> Finished {
        let Run {
            sim,
            world,
            mut admin,
            history,
            keys,
            providers,
            steps,
            pg_kept,
            processes,
            ..
        } = self;
        // The hosts stop: the connections their workers leave idle are kept, and the
        // processes of reusable roles left running.
        pg_kept.collect();
        processes.collect();
        drop(sim);
        admin.processes = processes.drain().into_iter().map(|k| Box::new(k) as Box<dyn std::any::Any + Send>).collect();
        let reused = processes.reused();
        // Reset now, before the checker's statements and the namespace's TRUNCATE: a
        // transaction a workload opened by hand would hold the locks the TRUNCATE waits for.
        admin.kept = crate::namespace::worker_pg::reset(pg_kept.drain());
        let effects = providers.iter().flat_map(|p| p.effects()).collect();
        let mut w = world.borrow_mut();
        let passed = w
            .mailboxes
            .iter()
            .flat_map(|(n, s)| s.passed.iter().map(move |cp| (n.clone(), *cp)))
            .collect();
        let names = std::mem::take(&mut w.names);
        let provider_calls = std::mem::take(&mut w.net.calls);
        let deliveries = std::mem::take(&mut w.net.deliveries);
        Finished {
            history,
            admin,
            calls: w.calls,
            passed,
            keys: keys.into_iter().collect(),
            names,
            effects,
            provider_calls,
            deliveries,
            steps,
            reused,
        }
    }
}
