//! Helpers shared by the integration tests: the in-tree workloads as the binary registers them.
#![allow(dead_code)]

use std::rc::Rc;
use std::sync::Arc;

use crashpoint::scenario::Scenario;
use crashpoint::workload::{Registry, Workload};
use crashpoint::System;

/// The workloads of the `crashpoint` binary, in its order.
pub fn registry() -> Registry {
    Registry::new(vec![
        Arc::new(crashpoint_payout::Payout),
        Arc::new(crashpoint_counter::Counter),
        Arc::new(crashpoint_orders::Orders),
    ])
}

/// The scenario named `name` of the repository's `scenarios/`.
pub fn scenario(name: &str) -> Scenario {
    crashpoint::testkit::scenario(&registry(), name)
}

/// The payout workload's system named `name` (`reference` or a mutant).
pub fn payout(name: &str) -> Rc<dyn System> {
    crashpoint_payout::Payout.system(name).unwrap_or_else(|| panic!("no payout system {name}"))
}

/// The payout reference with its consumer (role `c`) replaced by `consumer(the reference's
/// consumer)`, under the system name `name`: a test's own variant of the handler.
pub fn payout_with_consumer(
    name: &'static str,
    consumer: fn(Rc<dyn crashpoint::Handler>) -> Rc<dyn crashpoint::Handler>,
) -> Rc<dyn System> {
    Rc::new(WithConsumer { name, base: payout("reference"), consumer })
}

/// See [`payout_with_consumer`].
struct WithConsumer {
    name: &'static str,
    base: Rc<dyn System>,
    consumer: fn(Rc<dyn crashpoint::Handler>) -> Rc<dyn crashpoint::Handler>,
}

impl System for WithConsumer {
    fn name(&self) -> &str {
        self.name
    }
    fn schema_sql(&self) -> std::borrow::Cow<'_, str> {
        self.base.schema_sql()
    }
    fn program(&self, role: &str) -> Option<crashpoint::Program> {
        match (role, self.base.program(role)) {
            ("c", Some(crashpoint::Program::Handler(h))) => Some(crashpoint::Program::Handler((self.consumer)(h))),
            (_, p) => p,
        }
    }
}

/// A schedule's text form parsed for scenario `s`'s workload.
pub fn schedule(s: &Scenario, text: &str) -> crashpoint::schedule::Schedule {
    crashpoint::schedule::parse(text, &crashpoint::schedule::Vocabulary::of(s.workload.as_ref()))
        .expect("schedule parses")
}

/// The `crashpoint` binary, run on this test process's services (handed over as the external
/// provider, every LocalStack instance of them), with `CI` set.
pub fn crashpoint_on_test_services() -> std::process::Command {
    let e = crashpoint::testkit::endpoints();
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_crashpoint"));
    c.env("DATABASE_URL", &e.database_url)
        .env("SQS_ENDPOINT_URL", &e.sqs_endpoint_url)
        .env(crashpoint::services::external::SQS_SHARDS_VAR, e.sqs_shards.join(","))
        .env("REDIS_URL", &e.redis_url)
        .env("CI", "true");
    c
}

/// Runs each scripted scenario of `names` on the payout reference twice: it must pass, and the
/// second trace must equal the first byte for byte.
pub fn passes_twice_identically(names: &[&str]) {
    for name in names {
        let s = scenario(name);
        let first =
            crashpoint::scenario::run_scenario(&crashpoint::testkit::endpoints(), payout("reference"), &s, None)
                .unwrap();
        assert!(first.passed(), "{name} failed:\n{}", first.trace);
        let second =
            crashpoint::scenario::run_scenario(&crashpoint::testkit::endpoints(), payout("reference"), &s, None)
                .unwrap();
        assert_eq!(first.trace, second.trace, "{name}: the same schedule gave another trace");
    }
}

/// Explores each mutant `(name, budget in schedules, scenario)` with seed 1, a few at a time
/// each starting on one slot (`explore::explore_each`, as `crashpoint catalogue` does), and returns
/// the reports in the order given. Panics on a harness or services error.
pub fn explore_mutants(mutants: &[(&str, u64, &Scenario)]) -> Vec<crashpoint::explore::Report> {
    use crashpoint::explore::{self, Job, Options};
    let jobs: Vec<Job> = mutants
        .iter()
        .map(|&(system, budget, scenario)| Job {
            system,
            scenario,
            options: Options { schedules: Some(budget), seed: 1, ..Options::default() },
        })
        .collect();
    let mut reports = Vec::new();
    explore::explore_each(&crashpoint::testkit::endpoints(), &jobs, explore::default_jobs(), |job, r| {
        reports.push(r.map_err(|e| anyhow::anyhow!("{}: {e:#}", job.system))?);
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{e:#}"));
    reports
}
