//! crashpoint: a deterministic failure-injection harness for at-least-once message handlers,
//! generic over the system it tests.
//!
//! A [`Workload`] declares a system's queues, roles and crash points, how scenario events
//! become messages, its invariants, its own faults, and its systems (a reference and known-bad
//! mutants). The engine runs them against real PostgreSQL, SQS (LocalStack) and Redis, one
//! service call at a time, and never names a workload's tables, queues or calls.
//!
//! Everything a workload author needs is here, at the root, under one path each:
//! - what a workload declares: [`Workload`], [`QueueSpec`], [`RoleSpec`], [`CrashPoint`],
//!   [`Event`], [`SystemInfo`], [`Leftover`], [`WorkloadFault`], [`External`];
//! - the programs of its roles and the one handle they reach the services through: [`System`],
//!   [`Program`], [`Handler`], [`Poller`], [`Producer`], [`Cx`];
//! - its invariants: [`Invariant`], [`SqlInvariant`], [`CheckCx`], [`Verdict`], [`History`];
//! - its external providers: [`Provider`];
//! - its binary: [`main!`] (or [`main_with`], with workloads declared in files);
//! - its tests: [`testkit`].
//!
//! The smallest workload: one queue, a producer that sends each scenario event, and a
//! consumer that deletes what it receives; no invariant of its own (the engine's still run).
//!
//! ```
//! use std::rc::Rc;
//! use crashpoint::{
//!     async_trait, derive_id, event_specs, CallError, Cx, Delivery, Event, Handler, Invariant, Labels,
//!     Program, QueueSpec, RoleKind, RoleSpec, SendEach, System, SystemInfo, Workload,
//! };
//!
//! /// The consumer: deletes each message it receives (no effect, nothing to duplicate).
//! struct Consumer;
//!
//! #[async_trait(?Send)]
//! impl Handler for Consumer {
//!     async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
//!         cx.delete(&d).await
//!     }
//! }
//!
//! struct Reference;
//!
//! impl System for Reference {
//!     fn name(&self) -> &str { "reference" }
//!     fn schema_sql(&self) -> std::borrow::Cow<'_, str> { "".into() }
//!     fn program(&self, role: &str) -> Option<Program> {
//!         match role {
//!             "p" => Some(Program::Producer(Rc::new(SendEach { queue: "greetings", after_send: "after_send" }))),
//!             "c" => Some(Program::Handler(Rc::new(Consumer))),
//!             _ => None,
//!         }
//!     }
//! }
//!
//! /// One `[[events]]` table of a scenario: `name = "e1"`.
//! #[derive(serde::Deserialize)]
//! struct Greeting { name: String }
//!
//! struct Hello;
//!
//! impl Workload for Hello {
//!     fn name(&self) -> &'static str { "hello" }
//!     fn about(&self) -> &'static str { "a consumer that deletes what it receives" }
//!     fn queues(&self) -> Vec<QueueSpec> { vec![QueueSpec::new("greetings", "m")] }
//!     fn roles(&self) -> Vec<RoleSpec> {
//!         vec![
//!             RoleSpec { prefix: "p", kind: RoleKind::Producer, points: &["after_send"], about: "producer" },
//!             RoleSpec { prefix: "c", kind: RoleKind::Handler { queue: "greetings" }, points: &[], about: "consumer" },
//!         ]
//!     }
//!     fn events(&self, specs: &[toml::Table], ns: uuid::Uuid, names: &mut Labels) -> Result<Vec<Event>, String> {
//!         let mut events = Vec::new();
//!         for g in event_specs::<Greeting>(specs)? {
//!             let id = derive_id(ns, "greeting", &g.name);
//!             names.set(id, &g.name);
//!             events.push(Event { label: g.name, identity: id, body: serde_json::json!({ "id": id }) });
//!         }
//!         Ok(events)
//!     }
//!     fn identity(&self, body: &serde_json::Value) -> Option<(&'static str, uuid::Uuid)> {
//!         Some(("greetings", body.get("id")?.as_str()?.parse().ok()?))
//!     }
//!     fn invariants(&self) -> Vec<Box<dyn Invariant>> { Vec::new() }
//!     fn systems(&self) -> Vec<SystemInfo> {
//!         vec![SystemInfo::reference("deletes what it receives")]
//!     }
//!     fn system(&self, name: &str) -> Option<Rc<dyn System>> {
//!         (name == "reference").then(|| Rc::new(Reference) as Rc<dyn System>)
//!     }
//! }
//!
//! let mut names = Labels::default();
//! let specs: Vec<toml::Table> = vec![toml::from_str(r#"name = "e1""#).unwrap()];
//! let events = Hello.events(&specs, uuid::Uuid::nil(), &mut names).unwrap();
//! assert_eq!(Hello.identity(&events[0].body), Some(("greetings", events[0].identity)));
//! // Its binary is one line, `crashpoint::main!(Hello);`: the whole `crashpoint` command.
//! ```
//!
//! The crate follows Jepsen's split of a test; its modules are internal (the `internals`
//! feature opens them to crashpoint's own integration tests, and is no stable interface):
//! - `services`: real PostgreSQL, SQS (LocalStack) and Redis, provisioned natively, through
//!   testcontainers, or taken from the environment, and the SQS calibration;
//! - `workload` and `spec`: what a workload declares (plain data);
//! - `sim`: the turmoil fleet, the gate that makes every service call a yield point ([`Cx`])
//!   and the program traits it drives, the logical clock and the scheduler; external workers
//!   (a team's process in any language) gated at the wire by PostgreSQL, SQS and Redis
//!   proxies; the simulated network to the workload's providers;
//! - `namespace`: a schedule's schema, queues and Redis prefix in the real services, pooled and
//!   reset between schedules;
//! - `record`: what a schedule did: its history of steps and faults, its trace text, and the
//!   labels that make ids readable and stable from run to run;
//! - `provider`: external providers (payment gateways, mail APIs) a workload declares, run as
//!   turmoil hosts, with the ledger of effects the checker reads;
//! - `schedule`: schedules as data and their text form;
//! - `nemesis`: what the nemesis does to the world, including the AWS-only SQS behaviours and
//!   the network and provider faults;
//! - `checker`: invariants over the real final state and the recorded history;
//! - `report`: the report files (junit.xml, report.json, summary.md) and the HTML timeline of
//!   a failing schedule;
//! - `scenario`: scenario files under `scenarios/`;
//! - `explore`: generated schedules, shrinking, determinism self-check, coverage;
//! - `cli`: the `crashpoint` command as a library function, for any binary ([`main!`]);
//! - `error`: exit codes; `duration`: durations in schedules and traces.

#![warn(missing_docs)]

/// Declares the engine's modules: `pub` with the `internals` feature (crashpoint's own
/// integration tests reach into them), private otherwise, so that a workload author sees one
/// path per item, the root's.
macro_rules! internal_modules {
    ($($name:ident),* $(,)?) => {$(
        #[cfg(feature = "internals")]
        #[doc(hidden)]
        pub mod $name;
        #[cfg(not(feature = "internals"))]
        mod $name;
    )*};
}

internal_modules!(
    checker, cli, duration, error, explore, namespace, nemesis, provider, record, report, scenario, schedule, services,
    sim, spec, workload
);

pub mod files;
pub mod testkit;

/// The attribute the program traits need on their implementations: `#[async_trait(?Send)]`
/// (the `async-trait` crate; the programs run on one thread).
pub use async_trait::async_trait;
pub use checker::{
    decide, CheckCx, CopiesBounded, Culprit, CulpritKind, FailedAcksHandled, Invariant, NoReplaySuppressed,
    NothingExpired, Problem, Quiescence, ReleasedByHolder, SqlInvariant, StoppedHoldsNothing, Verdict, WorkersSurvive,
    COPIES_BOUNDED, FAILED_ACKS_HANDLED, NOTHING_EXPIRED, NO_REPLAY_SUPPRESSED, QUIESCENCE, RELEASED_BY_HOLDER,
    STOPPED_HOLDS_NOTHING, WORKERS_SURVIVE,
};
pub use cli::{main, main_with, Declarations};
pub use duration::parse_duration_ms;
pub use namespace::admin::SqlClock;
pub use provider::api as http_api;
pub use provider::{Call as ProviderCall, Effect, Handled, Provider, Reply, Request};
pub use record::history::{Entry, Fact, FaultEvent, History, Outcome, Service, Step, WorkerRole};
pub use record::labels::Labels;
pub use scenario::InvariantSpec;
pub use sim::cx::{
    handle_one, handler_failed, CallError, Cx, Delivery, FailedEntry, Handler, Poller, Producer, Program, SendEach,
    System, Val, HANDLER_ERROR,
};
pub use sim::wire::host::RESERVED_ENV;
pub use sim::wire::webhook::answer_label as webhook_answer_label;
pub use sim::wire::{External, ExternalRaw, Variant as ExternalVariant};
pub use spec::{
    after_call, derive_id, event_specs, CrashPoint, DeadLetter, Event, IdentityFn, Leftover, QueueSpec, Resend,
    RoleKind, RoleSpec, SystemInfo, WorkloadFault, DEFAULT_RETENTION_S,
};
pub use workload::{Registry, Workload};
