//! Helpers shared by the integration tests: the in-tree workloads as the binary registers them.
#![allow(dead_code)]

use std::rc::Rc;
use std::sync::Arc;

use crashpoint::scenario::Scenario;
use crashpoint::sut::System;
use crashpoint::workload::{Registry, Workload};

/// The workloads of the `crashpoint` binary, in its order.
pub fn registry() -> Registry {
    Registry::new(vec![Arc::new(crashpoint_payout::Payout), Arc::new(crashpoint_counter::Counter), Arc::new(crashpoint_orders::Orders)])
}

/// The scenario named `name` of the repository's `scenarios/`.
pub fn scenario(name: &str) -> Scenario {
    crashpoint::testkit::scenario(&registry(), name)
}

/// The payout workload's system named `name` (`reference` or a mutant).
pub fn payout(name: &str) -> Rc<dyn System> {
    crashpoint_payout::Payout.system(name).unwrap_or_else(|| panic!("no payout system {name}"))
}

/// A schedule's text form parsed for scenario `s`'s workload.
pub fn schedule(s: &Scenario, text: &str) -> crashpoint::schedule::Schedule {
    crashpoint::schedule::parse(text, &crashpoint::schedule::Vocabulary::of(s.workload.as_ref())).expect("schedule parses")
}

/// The `crashpoint` binary, run on this test process's services (handed over as the external
/// provider), with `CI` set.
pub fn crashpoint_on_test_services() -> std::process::Command {
    let e = crashpoint::testkit::endpoints();
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_crashpoint"));
    c.env("DATABASE_URL", &e.database_url)
        .env("SQS_ENDPOINT_URL", &e.sqs_endpoint_url)
        .env("REDIS_URL", &e.redis_url)
        .env("CI", "true");
    c
}

/// Runs each scripted scenario of `names` on the payout reference twice: it must pass, and the
/// second trace must equal the first byte for byte.
pub fn passes_twice_identically(names: &[&str]) {
    for name in names {
        let s = scenario(name);
        let first = crashpoint::scenario::run_scenario(&crashpoint::testkit::endpoints(), payout("reference"), &s, None).unwrap();
        assert!(first.passed(), "{name} failed:\n{}", first.trace);
        let second = crashpoint::scenario::run_scenario(&crashpoint::testkit::endpoints(), payout("reference"), &s, None).unwrap();
        assert_eq!(first.trace, second.trace, "{name}: the same schedule gave another trace");
    }
}
