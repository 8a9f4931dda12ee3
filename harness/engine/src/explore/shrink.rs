//! Shrinking a failing schedule to a minimal one by deleting decisions (delta debugging,
//! Zeller's `ddmin` on the decision list), every candidate run on the real services, several
//! at once when the exploration has slots to spare.
//!
//! The candidates are the current schedule without one chunk of decisions: the whole schedule
//! first (the empty schedule: when the drain alone exposes the system, no shorter one exists),
//! then halves, quarters, … down to single decisions, each chunk in order. The first candidate
//! that still shows the failure becomes the current schedule. The shrink ends 1-minimal
//! (without any one of its decisions the failure is gone), after at most
//! [`super::SHRINK_RUNS_MAX`] runs. About 2·log2(n) runs when one decision of n exposes the
//! system, against n plus the element walk of proptest's value tree (17 → 1 decisions took
//! 23 runs that way).
//!
//! A candidate "still shows the failure" when it violates the invariant the original failure
//! violated first (in the checker's order), so that the shrink does not slip to another defect
//! (Hypothesis keeps a failure's origin the same way while it shrinks).
//!
//! With K slots, the next K candidates of a pass run at once and the first one (in pass order)
//! that shows the failure is taken; those after it are dropped unseen. That is the candidate a
//! one-at-a-time pass takes, and the runs counted are those it would make, so the minimal
//! schedule, its trace and the printed run count do not depend on K.

use std::collections::HashSet;
use std::rc::Rc;

use anyhow::{anyhow, Result};

use super::{slots, SHRINK_RUNS_MAX};
use crate::scenario::{run_scenario, Scenario, ScenarioOutcome};
use crate::schedule::Schedule;
use crate::services::Endpoints;
use crate::sim::cx::System;

/// Shrinks `failing` (an outcome of `system` on scenario `s` that violates an invariant) with
/// up to `jobs` candidates at once. Returns the minimal outcome and the schedules a
/// one-at-a-time shrink runs. Errors: a service failure while running a candidate.
pub(super) fn shrink(
    endpoints: &Endpoints,
    system: &Rc<dyn System>,
    s: &Scenario,
    jobs: usize,
    failing: ScenarioOutcome,
) -> Result<(ScenarioOutcome, usize)> {
    let first = failing.verdicts.iter().find(|v| !v.holds).map(|v| v.invariant.clone());
    let same_failure = |o: &ScenarioOutcome| {
        !o.passed() && (first.is_none() || o.verdicts.iter().any(|v| !v.holds && Some(&v.invariant) == first.as_ref()))
    };
    // Several at once only where the slots would run several (each thread with its own system).
    let width = match jobs > 1 && super::slots::parallel_ok(system.as_ref(), s) {
        true => jobs,
        false => 1,
    };
    ddmin(failing, |o| &o.schedule, same_failure, width, |batch| run_all(endpoints, system, s, batch))
}

/// `ddmin` over outcomes of type `O`: from `failing` (whose schedule `schedule_of` gives),
/// deletes chunks of decisions while `shows` holds for the candidate's outcome, running up to
/// `width` candidates at once through `run` (outcomes in the order given). Returns the last
/// outcome that showed the failure and the runs a one-at-a-time pass makes (at most
/// [`SHRINK_RUNS_MAX`]). Errors: the first error `run` returns in pass order.
fn ddmin<O>(
    failing: O,
    schedule_of: impl Fn(&O) -> &Schedule,
    shows: impl Fn(&O) -> bool,
    width: usize,
    mut run: impl FnMut(&[Schedule]) -> Vec<Result<O>>,
) -> Result<(O, usize)> {
    let mut best = failing;
    let mut runs = 0;
    // Candidates run that did not show the failure: runs are deterministic, so they are not
    // run again.
    let mut rejected: HashSet<Schedule> = HashSet::new();
    let mut chunk = schedule_of(&best).decisions.len();
    while chunk > 0 && runs < SHRINK_RUNS_MAX {
        let mut reduced = false;
        let mut start = 0;
        while start < schedule_of(&best).decisions.len() && runs < SHRINK_RUNS_MAX {
            // The candidates a one-at-a-time pass tries next while none shows the failure.
            let current = &schedule_of(&best).decisions;
            let (mut at, mut batch) = (Vec::new(), Vec::new());
            let mut next = start;
            while batch.len() < width.max(1) && next < current.len() && runs + batch.len() < SHRINK_RUNS_MAX {
                let mut decisions = current.clone();
                decisions.drain(next..(next + chunk).min(decisions.len()));
                let candidate = Schedule { decisions };
                // Deleting either of two equal neighbours gives the same candidate: a
                // one-at-a-time pass runs it once (the second is rejected by then).
                if !rejected.contains(&candidate) && !batch.contains(&candidate) {
                    at.push(next);
                    batch.push(candidate);
                }
                next += chunk;
            }
            start = next;
            let outcomes = run(&batch);
            for ((at, candidate), o) in at.into_iter().zip(&batch).zip(outcomes) {
                let o = o?;
                runs += 1;
                if shows(&o) {
                    best = o;
                    reduced = true;
                    // The chunk now at `at` is the one after the chunk deleted.
                    start = at;
                    break;
                }
                rejected.insert(candidate.clone());
            }
        }
        chunk = match (chunk, reduced) {
            (1, false) => 0,
            (1, true) => 1,
            (c, _) => (c / 2).max(1),
        };
    }
    Ok((best, runs))
}

/// Runs `batch`'s schedules: one in this thread on `system`, more at once on a thread each
/// with its own instance of the system. Outcomes in the order of `batch`; a panic is that
/// candidate's error.
fn run_all(endpoints: &Endpoints, system: &Rc<dyn System>, s: &Scenario, batch: &[Schedule]) -> Vec<Result<ScenarioOutcome>> {
    let run = |system: Rc<dyn System>, schedule: &Schedule| {
        slots::guarded(&format!("shrinking: schedule `{schedule}`"), || run_scenario(endpoints, system, s, Some(schedule)))
    };
    if let [only] = batch {
        return vec![run(system.clone(), only)];
    }
    let name = system.name().to_string();
    std::thread::scope(|scope| {
        let handles: Vec<_> = batch
            .iter()
            .enumerate()
            .map(|(k, schedule)| {
                let (name, run) = (name.clone(), &run);
                std::thread::Builder::new()
                    .name(format!("shrink-{k}"))
                    .spawn_scoped(scope, move || run(slots::instance(s, &name)?, schedule))
                    .expect("spawning a shrink thread")
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("a shrink thread panicked")))).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Decision;

    fn step(w: &str) -> Decision {
        Decision::Step { worker: w.into(), op: None }
    }

    fn schedule(workers: &str) -> Schedule {
        Schedule { decisions: workers.split(' ').map(step).collect() }
    }

    /// The failure: `c1` steps somewhere before `c2` does. Outcomes are the schedules
    /// themselves; `ran` records every schedule run, in order.
    fn shrink_with(width: usize, from: &str) -> (Schedule, usize, Vec<String>) {
        let shows = |s: &Schedule| {
            let at = |w: &str| s.decisions.iter().position(|d| *d == step(w));
            matches!((at("c1"), at("c2")), (Some(a), Some(b)) if a < b)
        };
        let mut ran = Vec::new();
        let (min, runs) = ddmin(schedule(from), |s| s, shows, width, |batch| {
            ran.extend(batch.iter().map(|s| s.to_string()));
            batch.iter().map(|s| Ok(s.clone())).collect()
        })
        .unwrap();
        (min, runs, ran)
    }

    #[test]
    fn shrinks_to_the_two_decisions_that_matter_and_is_one_minimal() {
        let (min, runs, ran) = shrink_with(1, "p p c3 c1 r1 p c3 d1 c2 r2 c3 p");
        assert_eq!(min, schedule("c1 c2"));
        // The whole schedule deleted first: the empty schedule.
        assert_eq!(ran[0], "");
        assert_eq!(runs, ran.len());
        // 12 decisions, far fewer than the 12 single deletions plus element walks of a
        // one-element-per-run pass.
        assert!(runs <= 16, "{runs} runs: {ran:?}");
    }

    #[test]
    fn slots_change_what_runs_but_not_the_minimum_nor_the_count() {
        for from in ["p p c3 c1 r1 p c3 d1 c2 r2 c3 p", "c1 c1 c2 c2", "c2 c1 p c2 c1"] {
            let one = shrink_with(1, from);
            for width in [2, 4, 7] {
                let many = shrink_with(width, from);
                assert_eq!((&many.0, many.1), (&one.0, one.1), "{from}: width {width} ran {:?}", many.2);
            }
        }
    }

    #[test]
    fn an_equal_candidate_runs_once() {
        // Deleting either `p` gives the same candidate.
        let (min, _, ran) = shrink_with(4, "c1 p p c2");
        assert_eq!(min, schedule("c1 c2"));
        let mut seen = HashSet::new();
        for s in &ran {
            assert!(seen.insert(s.clone()), "{s:?} ran twice: {ran:?}");
        }
    }

    #[test]
    fn the_first_error_in_pass_order_ends_the_shrink() {
        let r = ddmin(schedule("c1 c2"), |s| s, |_| true, 1, |_| vec![Err(anyhow!("PostgreSQL stopped accepting connections"))]);
        assert!(r.unwrap_err().to_string().contains("PostgreSQL"));
    }
}
