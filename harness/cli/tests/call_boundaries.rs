//! Every call boundary is a crash point: `crash@after_<call>` and
//! `fail@after_<call>` reach the place right after any call a worker makes, whether or not its
//! code marks a crash point there. Real services, started once for this test process through
//! the harness.

use crashpoint::scenario::{run_scenario, ScenarioOutcome};
use crashpoint::System;
mod common;
use crashpoint::testkit;

fn run(system: std::rc::Rc<dyn System>, scenario: &str, schedule: &str) -> ScenarioOutcome {
    let s = common::scenario(scenario);
    let schedule = common::schedule(&s, schedule);
    run_scenario(&testkit::endpoints(), system, &s, Some(&schedule)).unwrap_or_else(|e| panic!("{e:#}"))
}

fn violated(o: &ScenarioOutcome) -> Vec<&str> {
    o.verdicts.iter().filter(|v| !v.holds).map(|v| v.invariant.as_str()).collect()
}

/// `outbox-in-second-tx` commits the claim and the payout, then the outbox row in a second
/// transaction, with no crash point marked between the two. `after_commit` is the boundary
/// after the first `commit` it makes: the crash lands in the window, and the event is lost;
/// the reference, whose one commit has the same boundary, survives the same schedule.
#[test]
fn a_crash_at_the_boundary_after_an_unmarked_commit_catches_the_mutant_and_spares_the_reference() {
    let schedule = "p:lock p:send c1:recv c1:crash@after_commit";
    let o = run(common::payout("outbox-in-second-tx"), "windows/crash-after-commit", schedule);
    assert!(o.trace.contains("c1   ✗ CRASH at after_commit"), "{}", o.trace);
    assert!(violated(&o).iter().any(|v| v.starts_with("nothing lost")), "{:?}\n{}", violated(&o), o.trace);
    let r = run(common::payout("reference"), "windows/crash-after-commit", schedule);
    assert!(violated(&r).is_empty(), "{:?}\n{}", violated(&r), r.trace);
}

/// A failure injected at a boundary no code marks: the reference's `COMMIT` after its outbox
/// insert is replaced by an injected failure, the transaction rolls back, and the redelivery
/// pays once.
#[test]
fn a_failure_at_an_undeclared_boundary_replaces_the_next_call() {
    let o = run(
        common::payout("reference"),
        "windows/crash-after-commit",
        "p:lock p:send c1:recv c1:fail@after_insert_outbox",
    );
    assert!(o.trace.contains("injected failure at after_insert_outbox"), "{}", o.trace);
    assert!(violated(&o).is_empty(), "{:?}\n{}", violated(&o), o.trace);
}

/// The orders mutant `operations-after-commit` records its operations in a second transaction;
/// a crash at the boundary after its first `commit` loses the charge, the export and the email.
#[test]
fn the_orders_mutant_whose_window_has_no_crash_point_is_caught_at_its_boundary() {
    use crashpoint::Workload;
    let schedule = "p:send c1:recv c1:crash@after_commit";
    let o = run(crashpoint_orders::Orders.system("operations-after-commit").unwrap(), "orders/happy-path", schedule);
    assert!(o.trace.contains("c1   ✗ CRASH at after_commit"), "{}", o.trace);
    assert!(!violated(&o).is_empty(), "not caught:\n{}", o.trace);
    let r = run(crashpoint_orders::Orders.system("reference").unwrap(), "orders/happy-path", schedule);
    assert!(violated(&r).is_empty(), "{:?}\n{}", violated(&r), r.trace);
}

/// A boundary no worker reaches (a call label the code never uses) stops a scripted run with
/// an error that names it, rather than passing quietly.
#[test]
fn a_boundary_no_call_reaches_is_an_error_naming_it() {
    let s = common::scenario("windows/crash-after-commit");
    let schedule = common::schedule(&s, "p:lock p:send c1:recv c1:crash@after_lunch");
    let e = run_scenario(&testkit::endpoints(), common::payout("reference"), &s, Some(&schedule)).unwrap_err();
    assert!(format!("{e:#}").contains("crash point after_lunch"), "{e:#}");
}
