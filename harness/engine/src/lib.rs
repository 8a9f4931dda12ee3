//! crashpoint: a deterministic failure-injection harness for at-least-once message handlers,
//! generic over the system it tests.
//!
//! A [`Workload`] declares a system's queues, roles and crash points, how scenario events
//! become messages, its invariants, its own faults, and its systems (a reference and known-bad
//! mutants). The engine runs them against real PostgreSQL, SQS (LocalStack) and Redis, one
//! service call at a time, and never names a workload's tables, queues or calls.
//!
//! The crate follows Jepsen's split of a test:
//! - [`services`]: real PostgreSQL, SQS (LocalStack) and Redis, provisioned natively,
//!   through testcontainers, or taken from the environment, and the SQS calibration;
//! - [`workload`], [`spec`] and [`sut`]: the seam a system under test plugs into, what a
//!   workload declares (plain data), and the programs of its roles (producer, handler, poller);
//! - [`sim`]: the turmoil fleet, the gate that makes every service call a yield point ([`Cx`]),
//!   the logical clock and the scheduler; external workers (a team's process in any language)
//!   gated at the wire by PostgreSQL, SQS and Redis proxies ([`sim::wire`]); the simulated
//!   network to the workload's providers;
//! - [`provider`]: external providers (payment gateways, mail APIs) a workload declares, run as
//!   turmoil hosts, with the ledger of effects the checker reads;
//! - [`schedule`]: schedules as data and their text form;
//! - [`nemesis`]: what the nemesis does to the world, including the AWS-only SQS behaviours
//!   and the network and provider faults;
//! - [`checker`]: invariants over the real final state and the recorded history;
//! - [`report`]: the trace text, the report files (junit.xml, report.json, summary.md) and the
//!   HTML timeline of a failing schedule;
//! - [`scenario`]: scenario files under `scenarios/`;
//! - [`explore`]: generated schedules, shrinking, determinism self-check, coverage;
//! - [`cli`]: the `crashpoint` command as a library function, for any binary ([`main!`]);
//! - [`testkit`]: services started once per test process, and scenario loading, for `cargo test`;
//! - [`error`]: exit codes; [`duration`]: durations in schedules and traces.
//!
//! A team's own handler needs only the items re-exported here; its tests also use
//! [`testkit`], [`explore::explore`], [`explore::Options`] and [`scenario::Scenario`].

pub mod checker;
pub mod cli;
pub mod error;
pub mod explore;
pub mod nemesis;
pub mod report;
pub mod scenario;
pub mod schedule;
pub mod services;
pub mod sim;
pub mod spec;
pub mod duration;
pub mod provider;
pub mod sut;
pub mod testkit;
pub mod workload;

pub use checker::{decide, CheckCx, CulpritKind, Invariant, Problem, Quiescence, SqlInvariant, Verdict};
pub use sim::cx::{CallError, Cx, Delivery, Val};
pub use sim::history::Fact;
pub use sim::names::Names;
pub use provider::{Effect, Handled, Provider, Reply, Request};
pub use sut::{Handler, Poller, Producer, Program, SendEach, System};
pub use workload::{
    derive_id, event_specs, CrashPoint, Event, Leftover, QueueSpec, Registry, Resend, RoleKind, RoleSpec, SystemInfo, Workload, WorkloadFault,
};
