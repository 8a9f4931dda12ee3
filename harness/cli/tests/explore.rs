//! Exploration on real services: a bad consumer is caught and shrunk to a short schedule that
//! reproduces with the same trace; the reference passes generated schedules, deterministically.

use crashpoint::explore::{self, Options};
use crashpoint::nemesis::pg;
use crashpoint::scenario::run_scenario;
mod common;
use crashpoint::testkit;

#[test]
fn check_then_insert_is_caught_and_shrinks_to_at_most_8_decisions() {
    let s = common::scenario("payout/explore");
    let system = common::payout("check-then-insert");
    let opts = Options {
        schedules: Some(60),
        time: None,
        seed: 7,
        check_determinism: false,
        shard: Default::default(),
        jobs: explore::default_jobs(),
    };
    let report = explore::explore(&testkit::endpoints(), system.clone(), &s, &opts, |_| {}).unwrap();
    let f = report.failure.expect("check-then-insert was not caught in 60 schedules");
    assert!(
        f.minimal.schedule.decisions.len() <= 8,
        "shrunk only to {} decisions: {}",
        f.minimal.schedule.decisions.len(),
        f.minimal.schedule
    );
    assert!(f.minimal.schedule.decisions.len() <= f.original.decisions.len());
    let payout = f.minimal.verdicts.iter().find(|v| v.invariant == "exactly one payout per payment").unwrap();
    assert!(!payout.holds, "{:?}", f.minimal.verdicts);
    // The printed repro (the minimal schedule as text) reproduces the same failure and trace.
    let text = f.minimal.schedule.to_string();
    let again = run_scenario(&testkit::endpoints(), system, &s, Some(&common::schedule(&s, &text))).unwrap();
    assert!(!again.passed());
    assert_eq!(again.trace, f.minimal.trace);
    // The case seed regenerates the original schedule, unless a mutation made it (then the
    // repro is the schedule's text: `repro_seed` says so).
    match f.repro_seed() {
        Some(seed) => assert_eq!(explore::generate(&s, &Default::default(), seed).unwrap(), f.original),
        None => assert!(f.mutation && f.case_seed.is_some(), "a generated case without a repro seed"),
    }
}

#[test]
fn reference_passes_generated_schedules_and_each_runs_twice_identically() {
    let s = common::scenario("payout/explore");
    let opts = Options {
        schedules: Some(15),
        time: None,
        seed: 20261129,
        check_determinism: true,
        shard: Default::default(),
        jobs: explore::default_jobs(),
    };
    let report = explore::explore(&testkit::endpoints(), common::payout("reference"), &s, &opts, |_| {}).unwrap();
    if let Some(f) = &report.failure {
        panic!(
            "reference failed: divergence {:?}; schedule {}\n{:?}\n{}",
            f.divergence, f.minimal.schedule, f.minimal.verdicts, f.minimal.trace
        );
    }
    // Saved regressions of the scenario run first and count too.
    assert!(report.stats.schedules >= 15, "{}", report.stats.schedules);
    assert!(report.stats.calls.pg > 0 && report.stats.calls.sqs > 0 && report.stats.calls.redis > 0);
}

/// The reference survives lost COMMIT replies and reset connections anywhere a
/// generated schedule puts them (`[explore] pg_faults = true`), and the faults do occur.
#[test]
fn reference_passes_generated_schedules_with_postgresql_outcome_faults() {
    let mut s = common::scenario("payout/explore");
    s.explore.as_mut().unwrap().pg_faults = true;
    let opts = Options {
        schedules: Some(60),
        time: None,
        seed: 15,
        check_determinism: false,
        shard: Default::default(),
        jobs: explore::default_jobs(),
    };
    let report = explore::explore(&testkit::endpoints(), common::payout("reference"), &s, &opts, |_| {}).unwrap();
    if let Some(f) = &report.failure {
        panic!("reference failed: schedule {}\n{:?}\n{}", f.minimal.schedule, f.minimal.verdicts, f.minimal.trace);
    }
    for kind in ["pg:commit-response-lost", "pg:connection-reset"] {
        assert!(
            report.stats.faults.get(kind).copied().unwrap_or(0) > 0,
            "{kind} never generated: {:?}",
            report.stats.faults
        );
    }
    // Generated is not fired (a fault armed after the last statement does nothing): rerun the
    // generated schedules that arm one until each has taken a statement, as the trace shows.
    let mut fired = [(pg::COMMIT_REPLY_LOST, false), (pg::CONNECTION_RESET, false)];
    let armed = (0..60u64)
        .map(|i| explore::generate(&s, &Default::default(), explore::case_seed(opts.seed, i)).unwrap())
        .filter(|g| g.decisions.iter().any(|d| matches!(d, crashpoint::schedule::Decision::Pg(_))));
    for g in armed.take(20) {
        let o = run_scenario(&testkit::endpoints(), common::payout("reference"), &s, Some(&g)).unwrap();
        fired.iter_mut().for_each(|(text, seen)| *seen |= o.trace.contains(*text));
    }
    assert!(fired.iter().all(|(_, seen)| *seen), "not every fault took a statement: {fired:?}");
}

#[test]
fn check_determinism_passes_for_20_seeds() {
    let s = common::scenario("payout/explore");
    for seed in 1..=20 {
        let opts = Options {
            schedules: Some(1),
            time: None,
            seed,
            check_determinism: true,
            shard: Default::default(),
            jobs: explore::default_jobs(),
        };
        let r = explore::explore(&testkit::endpoints(), common::payout("reference"), &s, &opts, |_| {}).unwrap();
        if let Some(f) = r.failure {
            panic!("seed {seed}: divergence {:?} in {}", f.divergence, f.minimal.schedule);
        }
    }
}

#[test]
fn case_seeds_are_distinct_and_stable() {
    let a: Vec<u64> = (0..100).map(|i| explore::case_seed(1, i)).collect();
    let mut b = a.clone();
    b.sort();
    b.dedup();
    assert_eq!(b.len(), 100);
    assert_eq!(explore::case_seed(1, 0), explore::case_seed(1, 0));
    assert_ne!(explore::case_seed(1, 0), explore::case_seed(2, 0));
}

/// A guided exploration (`[explore] strategy = "guided"`) takes its feedback in case order:
/// the same cases, schedules and coverage on one slot, on four, and on one slot that idle
/// slots help (as in `crashpoint catalogue`, where the slot's thread also takes the helpers'
/// results in while a mutated case waits for feedback).
#[test]
fn a_guided_exploration_is_the_same_on_one_slot_and_on_four() {
    let mut s = common::scenario("payout/explore");
    s.explore.as_mut().unwrap().strategy = crashpoint::scenario::Strategy::Guided;
    let run = |jobs: usize| {
        let opts = Options { schedules: Some(40), seed: 5, jobs, ..Options::default() };
        explore::explore(&testkit::endpoints(), common::payout("reference"), &s, &opts, |_| {}).unwrap()
    };
    let (one, four) = (run(1), run(4));
    assert!(one.failure.is_none() && four.failure.is_none());
    assert_eq!(one.stats.cases, four.stats.cases, "the guided cases differ with the number of slots");
    assert_eq!(one.stats.signal, four.stats.signal);
    let mut helped = None;
    let job = explore::Job {
        system: "reference",
        scenario: &s,
        options: Options { schedules: Some(40), seed: 5, ..Options::default() },
    };
    explore::explore_each(&testkit::endpoints(), &[job], 4, |_, r| {
        helped = Some(r?);
        Ok(())
    })
    .unwrap();
    let helped = helped.expect("explore_each reported the job");
    assert_eq!(one.stats.cases, helped.stats.cases, "idle slots helping changed the guided cases");
    // Guidance changed what ran: some case is not the uniform schedule of its seed.
    let uniform: Vec<_> =
        (0..40).map(|i| explore::generate(&s, &Default::default(), explore::case_seed(5, i)).unwrap()).collect();
    let ids: Vec<_> = uniform.iter().map(explore::schedule_id).collect();
    assert!(one.stats.cases.iter().zip(&ids).any(|(c, u)| c.schedule != *u), "every case was its uniform schedule");
    // Two cases in three are uniform cases, which `repro --seed` rebuilds from their case seed
    // alone (the third is a mutation, with a seed of its own).
    for c in one.stats.cases.iter().filter(|c| c.index % 3 != 2) {
        let rebuilt = explore::schedule_id(&explore::generate(&s, &Default::default(), c.case_seed).unwrap());
        assert_eq!(c.schedule, rebuilt, "uniform case {} is not the schedule of its case seed", c.index);
    }
}
