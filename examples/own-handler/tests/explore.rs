//! The team's tests: the reference handler passes 200 generated schedules on the real
//! services, and the mutant is caught and shrunk to a minimal schedule.
//!
//! Services: started through the harness on first use, or taken from DATABASE_URL,
//! SQS_ENDPOINT_URL and REDIS_URL when all three are set.

use std::path::Path;
use std::sync::Arc;

use crashpoint::testkit::Scenario;
use crashpoint::testkit::{explore, ExploreOptions as Options};
use crashpoint::{testkit, Registry, Workload};
use crashpoint_example_own_handler::{OwnHandler, AT_MOST_ONE_EMAIL};

/// `own-handler/explore` from this crate's own `scenarios/` directory.
fn scenario() -> Scenario {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let registry = Registry::new(vec![Arc::new(OwnHandler)]);
    testkit::scenario_in(&dir, &registry, "own-handler/explore")
}

fn opts() -> Options {
    Options { schedules: Some(200), seed: 0, ..Options::default() }
}

#[test]
fn reference_passes_200_generated_schedules() {
    let s = scenario();
    let system = OwnHandler.system("reference").unwrap();
    let report = explore(&testkit::endpoints(), system, &s, &opts(), |_| {}).unwrap();
    if let Some(f) = &report.failure {
        panic!("reference failed on {}\n{:#?}\n{}", f.minimal.schedule, f.minimal.verdicts, f.minimal.trace);
    }
    assert!(report.stats.schedules >= 200, "only {} schedules ran", report.stats.schedules);
    println!("reference: {} schedules in {:?}", report.stats.schedules, report.stats.wall);
}

#[test]
fn without_inbox_is_caught_sending_a_second_email() {
    let s = scenario();
    let system = OwnHandler.system("without-inbox").unwrap();
    let report = explore(&testkit::endpoints(), system, &s, &opts(), |_| {}).unwrap();
    let f = report.failure.expect("without-inbox was not caught in 200 schedules");
    println!(
        "without-inbox caught after {} schedule(s); minimal schedule ({} decisions, {} shrink runs):\n  {}\n\n{}",
        f.schedules_until,
        f.minimal.schedule.decisions.len(),
        f.shrink_runs,
        f.minimal.schedule,
        f.minimal.trace
    );
    let violated: Vec<&str> = f.minimal.verdicts.iter().filter(|v| !v.holds).map(|v| v.invariant.as_str()).collect();
    assert_eq!(violated, [AT_MOST_ONE_EMAIL], "{:#?}", f.minimal.verdicts);
}
