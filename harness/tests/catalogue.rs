//! Soundness: every mutant of the catalogue is caught within its budget, shrunk to a short
//! counterexample; the reference passes 1000 generated schedules. Real services, started once
//! for this test process through the harness.

use crashpoint::explore::{self, Options};
use crashpoint::sut::{self, mutants::CATALOGUE};
use crashpoint::testkit;

/// Each mutant and the schedules it may take to be caught with seed 1 (the catalogue's
/// default). Measured first-failure indexes are 1 to 19; the budgets leave room.
const BUDGETS: &[(&str, u64)] = &[
    ("no-dedup", 10),
    ("check-then-insert", 40),
    ("redis-only-dedup", 10),
    ("dedup-separate-tx", 10),
    ("key-per-attempt", 10),
    ("ack-before-commit", 10),
    ("relay-mark-before-send", 10),
    ("naive-downstream", 10),
    ("short-retention", 10),
    ("lock-released-on-failure", 10),
    ("skip-without-delete", 40),
    ("park-failure-acked", 10),
    ("relay-mark-fails-after-send", 10),
    ("balance-increment", 10),
];


#[test]
fn budgets_cover_the_whole_catalogue() {
    let mut names: Vec<&str> = CATALOGUE.iter().map(|(n, _)| *n).collect();
    let mut budgeted: Vec<&str> = BUDGETS.iter().map(|(n, _)| *n).collect();
    names.sort();
    budgeted.sort();
    assert_eq!(names, budgeted);
    assert_eq!(names.len(), 14);
    for n in names {
        assert!(sut::by_name(n).is_ok(), "{n} does not resolve");
    }
}

#[test]
fn every_mutant_is_caught_within_its_budget_with_a_short_counterexample() {
    let s = testkit::scenario("payout/explore");
    let mut missed = Vec::new();
    for (name, budget) in BUDGETS {
        let opts = Options { schedules: Some(*budget), time: None, seed: 1, check_determinism: false };
        let r = explore::explore(&testkit::endpoints(), sut::by_name(name).unwrap(), &s, &opts, |_| {}).unwrap();
        match r.failure {
            None => missed.push(format!("{name}: not caught in {budget} schedules")),
            Some(f) => {
                assert!(!f.minimal.passed(), "{name}: the minimal schedule passes");
                let n = f.minimal.schedule.decisions.len();
                if n > 10 {
                    missed.push(format!("{name}: shrunk only to {n} decisions: {}", f.minimal.schedule));
                }
            }
        }
    }
    assert!(missed.is_empty(), "{missed:#?}");
}

#[test]
fn reference_passes_1000_generated_schedules() {
    let s = testkit::scenario("payout/explore");
    let opts = Options { schedules: Some(1000), time: None, seed: 1000, check_determinism: false };
    let r = explore::explore(&testkit::endpoints(), sut::by_name("reference").unwrap(), &s, &opts, |_| {}).unwrap();
    if let Some(f) = &r.failure {
        panic!("reference failed: {}\n{:?}\n{}", f.minimal.schedule, f.minimal.verdicts, f.minimal.trace);
    }
    assert!(r.stats.schedules >= 1000);
}
