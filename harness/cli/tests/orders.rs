//! The orders article's orders, the third workload: external providers on turmoil's simulated network
//! (real PostgreSQL and SQS, started once for this test process through the harness). Its
//! mutants are caught and shrunk, its reference passes generated schedules with network and
//! provider faults on the menu, its scripted windows keep their facts and repeat byte for
//! byte, and a failing schedule's timeline draws the providers' lanes.

use crashpoint::explore::{self, Options};
use crashpoint::scenario::run_scenario;
use crashpoint::testkit;
use crashpoint::Workload;

mod common;

fn orders(name: &str) -> std::rc::Rc<dyn crashpoint::System> {
    crashpoint_orders::Orders.system(name).unwrap_or_else(|| panic!("no orders system {name}"))
}

/// Each mutant, its budget with seed 1, and the invariants its own defect breaks: one of them
/// must be violated. A wrong idempotency key or a retried unknown outcome duplicates the effect
/// at whichever keyed provider the schedule retries: the gateway's charge or accounting's
/// record (the minimal schedule keeps the invariant the first failure violated, and seed 1
/// first retries accounting). Measured first failures (2026-11-30, `crashpoint catalogue
/// orders`): 2, 2, 2, 1, 2, 1, 2, 7.
const MUTANTS: &[(&str, u64, &[&str])] = &[
    ("key-per-attempt", 20, &[ONE_CHARGE, ONE_EXPORT]),
    ("key-hashes-request", 20, &[ONE_CHARGE, ONE_EXPORT]),
    ("timeout-is-failure", 20, &[ONE_CHARGE, ONE_EXPORT]),
    ("in-progress-forever", 20, &["every operation resolved or parked with a reason"]),
    ("in-progress-expiring", 20, &[ONE_CHARGE, ONE_EXPORT]),
    ("no-reconciliation", 20, &["every operation resolved or parked with a reason"]),
    ("all-or-nothing", 20, &["no email sent twice inside the mail provider's dedup window"]),
    ("flag-claim", 20, &["local operations and provider ledgers agree"]),
    // Its window (between two commits) has no declared crash point (measured:
    // schedule 5).
    ("operations-after-commit", 30, &[ONE_EXPORT]),
];
const ONE_CHARGE: &str = "at most one charge per order at the gateway";
const ONE_EXPORT: &str = "exactly one accounting record per invoice";

#[test]
fn every_orders_mutant_is_caught_and_shrunk_to_at_most_5_decisions() {
    let s = common::scenario("orders/explore");
    let names: Vec<&str> =
        crashpoint_orders::mutants::CATALOGUE.iter().filter(|v| !v.info.must_pass).map(|v| v.info.name).collect();
    assert_eq!(names, MUTANTS.iter().map(|m| m.0).collect::<Vec<_>>());
    let mutants: Vec<_> = MUTANTS.iter().map(|(name, budget, _)| (*name, *budget, &s)).collect();
    for ((name, budget, invariant), r) in MUTANTS.iter().zip(common::explore_mutants(&mutants)) {
        let f = r.failure.unwrap_or_else(|| panic!("{name}: not caught in {budget} schedules"));
        let broken: Vec<&str> = f.minimal.verdicts.iter().filter(|v| !v.holds).map(|v| v.invariant.as_str()).collect();
        assert!(
            broken.iter().any(|b| invariant.contains(b)),
            "{name}: caught by {broken:?}, not by one of {invariant:?}\n{}",
            f.minimal.trace
        );
        assert!(f.minimal.schedule.decisions.len() <= 5, "{name}: shrunk only to {}", f.minimal.schedule);
        // The repro prints the same trace: ids the workload never labelled (keys a mutant
        // derives from random ids) are labelled too.
        let again = run_scenario(&testkit::endpoints(), orders(name), &s, Some(&f.minimal.schedule)).unwrap();
        assert_eq!(again.trace, f.minimal.trace, "{name}: the minimal schedule run again gave another trace");
    }
}

#[test]
#[ignore = "full tier: 1000 schedules; `cargo test -- --include-ignored` runs it"]
fn orders_reference_passes_1000_generated_schedules_with_network_faults() {
    let s = common::scenario("orders/explore");
    let opts = Options { schedules: Some(1000), seed: 3003, jobs: explore::default_jobs(), ..Options::default() };
    let r = explore::explore(&testkit::endpoints(), orders("reference"), &s, &opts, |_| {}).unwrap();
    if let Some(f) = &r.failure {
        panic!("reference failed: {}\n{:?}\n{}", f.minimal.schedule, f.minimal.verdicts, f.minimal.trace);
    }
    assert!(r.stats.schedules >= 1000);
    for kind in [
        "net:drop-request@",
        "net:drop-response@",
        "net:delay@",
        "net:partition@",
        "provider:5xx-before@",
        "provider:5xx-after@",
        "provider:restart@",
    ] {
        assert!(r.stats.faults.get(kind).is_some_and(|n| *n > 0), "no schedule used {kind}: {:?}", r.stats.faults);
    }
    assert!(r.stats.calls.net > 0, "no request reached a provider");
    let never: Vec<String> = r
        .stats
        .coverage_rows()
        .into_iter()
        .filter(|(_, c)| c.passed == 0)
        .map(|((role, p), _)| format!("{role} {p}"))
        .collect();
    // Per role: the consumer's `after_call` follows an inline provider call, which only the
    // mutants that call providers from the handler make; the reference's consumer never does.
    assert_eq!(never, ["c after_call"], "crash points never reached by their role");
}

/// The orders article's windows on the reference: each passes, shows its facts, and gives the same
/// trace twice (the providers answer over turmoil's network, deterministically).
#[test]
fn seed_003_windows_pass_and_repeat_byte_for_byte() {
    for name in [
        "orders/happy-path",
        "orders/concurrent-duplicates",
        "orders/local-write-fails",
        "orders/timeout-manual-replay",
        "orders/lost-response-reconciled",
        "orders/redelivery-after-commit",
        "orders/delayed-request-after-retry",
    ] {
        let s = common::scenario(name);
        let first = run_scenario(&testkit::endpoints(), orders("reference"), &s, None).unwrap();
        assert!(first.passed(), "{name}: {:?}\n{}", first.verdicts, first.trace);
        assert!(
            first.missing_trace_facts.is_empty(),
            "{name}: missing {:?}\n{}",
            first.missing_trace_facts,
            first.trace
        );
        let second = run_scenario(&testkit::endpoints(), orders("reference"), &s, None).unwrap();
        assert_eq!(first.trace, second.trace, "{name}: the same schedule gave another trace");
    }
}

/// The lost-response window discriminates: the mutant that takes the timeout as a failure
/// charges twice there, and its timeline draws the gateway's lane with the lost response.
#[test]
fn a_lost_response_charges_twice_when_a_timeout_is_taken_as_failure() {
    let s = common::scenario("orders/lost-response-reconciled");
    let o = run_scenario(&testkit::endpoints(), orders("timeout-is-failure"), &s, None).unwrap();
    let broken: Vec<&str> = o.verdicts.iter().filter(|v| !v.holds).map(|v| v.invariant.as_str()).collect();
    assert!(broken.contains(&"at most one charge per order at the gateway"), "{broken:?}\n{}", o.trace);
    assert!(
        o.trace.contains("order o1 charged 2 times (ch1, ch2)")
            || o.verdicts.iter().any(|v| v.detail.contains("order o1 charged 2 times")),
        "{:?}",
        o.verdicts
    );
    let html = crashpoint::report::timeline::render("orders/lost-response-reconciled", &o, &[]);
    for lane in ["gateway", "mail", "accounting"] {
        assert!(html.contains(&format!("data-lane=\"{lane}\"")), "no lane {lane}");
    }
    assert!(html.contains("the response is lost"), "the dropped response is not drawn");
    assert!(html.contains(r#"class="note lost"#), "the dropped response is not marked as lost");
}

/// `--check-determinism` on generated schedules with network and provider faults: each runs
/// twice and gives the same trace, byte for byte (turmoil's network with a fixed latency and
/// seed, providers without I/O).
#[test]
fn generated_schedules_with_network_faults_run_twice_identically() {
    let s = common::scenario("orders/explore");
    let opts = Options { schedules: Some(40), seed: 33, check_determinism: true, ..Options::default() };
    let r = explore::explore(&testkit::endpoints(), orders("reference"), &s, &opts, |_| {}).unwrap();
    if let Some(f) = r.failure {
        panic!("divergence {:?} in {}\n{}", f.divergence, f.minimal.schedule, f.minimal.trace);
    }
    let net: u64 = r
        .stats
        .faults
        .iter()
        .filter(|(k, _)| k.starts_with("net:") || k.starts_with("provider:"))
        .map(|(_, n)| n)
        .sum();
    assert!(net > 0, "no schedule had a network or provider fault: {:?}", r.stats.faults);
    let d = r.stats.determinism.expect("the check is counted");
    assert_eq!(
        (d.ran_twice, d.identical),
        (r.stats.schedules, r.stats.schedules),
        "every schedule ran twice, identically"
    );
    assert_eq!(
        d.line(),
        format!("determinism: {} schedule(s) ran twice, every trace the same byte for byte", r.stats.schedules)
    );
}
