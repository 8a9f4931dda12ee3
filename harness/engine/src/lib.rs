//! crashpoint: a deterministic failure-injection harness for at-least-once message handlers.
//!
//! The crate follows Jepsen's split of a test:
//! - [`services`]: real PostgreSQL, SQS (LocalStack) and Redis, provisioned natively,
//!   through testcontainers, or taken from the environment, and the SQS calibration;
//! - [`sut`]: the system under test (producer, consumer, relay, downstream, retention job)
//!   behind traits, with the reference implementation from seed 000;
//! - [`sim`]: the turmoil fleet, the gate that makes every service call a yield point,
//!   the logical clock and the scheduler;
//! - [`schedule`]: schedules as data and their text form;
//! - [`faults`]: what the nemesis does to the world, including the AWS-only SQS behaviours;
//! - [`checker`]: invariants over the real final state and the recorded history;
//! - [`report`]: the trace text, the report files (junit.xml, report.json, summary.md) and the
//!   HTML timeline of a failing schedule;
//! - [`scenario`]: scenario files under `scenarios/`;
//! - [`explore`]: generated schedules, shrinking, determinism self-check, coverage;
//! - [`cli`]: the `crashpoint` command.

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
pub mod sut;
pub mod testkit;
pub mod workload;
