//! Mutations of schedules, for guided exploration (issue 44 §2): a schedule that reached new
//! coverage is changed a little, in the manner of AFL's havoc stage and of Zest's
//! mutations of a generator's choices (Padhye et al., ISSTA 2019), so that its neighbours are
//! tried before the rest of the space.
//!
//! Every draw comes from the case's own proptest runner (seeded by its case seed), so a
//! mutation is as deterministic as a fresh schedule.

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

use super::strategy::{cap_ticks, decision};
use super::{Menu, Schedule};

/// A number in `0..n` (`n` > 0), drawn from `runner`.
fn below(runner: &mut TestRunner, n: usize) -> usize {
    (0..n).new_tree(runner).map(|t| t.current()).unwrap_or(0)
}

/// Makes the worker of one of `d`'s steps fall behind right after it: inserts `<worker>:lag`
/// there and removes the later decisions that move that worker. `false` (and `d` unchanged)
/// when `d` has no step.
fn lag(d: &mut Vec<super::Decision>, runner: &mut TestRunner) -> bool {
    use super::Decision;
    let steps: Vec<usize> = (0..d.len()).filter(|i| matches!(d[*i], Decision::Step { .. })).collect();
    if steps.is_empty() {
        return false;
    }
    let i = steps[below(runner, steps.len())];
    let Decision::Step { worker, .. } = d[i].clone() else {
        return false;
    };
    // A restart or another lag does not move it.
    let moves = |x: &Decision| {
        x.worker() == Some(worker.as_str()) && !matches!(x, Decision::Restart { .. } | Decision::Lag { .. })
    };
    let rest: Vec<Decision> = d.drain(i + 1..).filter(|x| !moves(x)).collect();
    d.push(Decision::Lag { worker });
    d.extend(rest);
    true
}

/// One fresh decision of `menu`'s kind, as a generated schedule draws them.
fn fresh(menu: &Menu, runner: &mut TestRunner) -> Option<super::Decision> {
    decision(menu).new_tree(runner).ok().map(|t| t.current())
}

/// A mutation of one of `parents` (and, for a splice, of another): one of
/// - `insert`: a fresh decision at a random place;
/// - `delete`: one decision removed;
/// - `replace`: one decision replaced by a fresh one;
/// - `splice`: the first part of one parent, the rest of another;
/// - `extend`: the first part of the parent, then up to four fresh decisions;
/// - `lag`: after one of a worker's steps, that worker falls behind (`c1:lag`) and the parent's
///   later decisions that move it are left out: in the drain its next transaction stays open
///   before COMMIT while the others run theirs to the end, the priority change of PCT
///   (Burckhardt et al., ASPLOS 2010). Windows of order (a relay's watermark passing a
///   sequence value taken by a transaction not yet committed) need a transaction that began
///   first to commit last, which uniform steps rarely give.
///
/// Returns the schedule, at most `menu.decisions_max` decisions with its ticks capped as a
/// generated one's. `parents` must not be empty.
pub fn mutate<P: std::borrow::Borrow<Schedule>>(menu: &Menu, parents: &[P], runner: &mut TestRunner) -> Schedule {
    let mut d = parents[below(runner, parents.len())].borrow().decisions.clone();
    let at = |runner: &mut TestRunner, len: usize| below(runner, len + 1);
    match below(runner, 6) {
        5 if lag(&mut d, runner) => {}
        0 => {
            let i = at(runner, d.len());
            if let Some(x) = fresh(menu, runner) {
                d.insert(i, x);
            }
        }
        1 if !d.is_empty() => {
            d.remove(below(runner, d.len()));
        }
        2 if !d.is_empty() => {
            let i = below(runner, d.len());
            if let Some(x) = fresh(menu, runner) {
                d[i] = x;
            }
        }
        3 if parents.len() > 1 => {
            let other = &parents[below(runner, parents.len())].borrow().decisions;
            let cut = at(runner, d.len());
            let from = at(runner, other.len());
            d.truncate(cut);
            d.extend(other[from..].iter().cloned());
        }
        _ => {
            let cut = at(runner, d.len());
            d.truncate(cut);
            for _ in 0..=below(runner, 4) {
                if let Some(x) = fresh(menu, runner) {
                    d.push(x);
                }
            }
        }
    }
    d.truncate(menu.decisions_max);
    Schedule { decisions: cap_ticks(d, menu.clock_max_ms) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::text::tests::vocabulary;
    use crate::schedule::Decision;

    #[test]
    fn a_lag_follows_a_step_of_its_worker_and_leaves_out_what_moves_it_later() {
        let parent = crate::schedule::parse("p c1 c2 tick:31s c1 c1:crash@after_commit c2 c1:restart c1", &vocabulary()).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..40u8 {
            let mut runner = TestRunner::new_with_rng(Default::default(), proptest::test_runner::TestRng::from_seed(proptest::test_runner::RngAlgorithm::ChaCha, &[seed; 32]));
            let mut d = parent.decisions.clone();
            assert!(lag(&mut d, &mut runner));
            let at = d.iter().position(|x| matches!(x, Decision::Lag { .. })).unwrap();
            let Decision::Lag { worker } = d[at].clone() else { unreachable!() };
            // Right after one of its own steps, the decisions before it unchanged.
            assert_eq!(d[..at], parent.decisions[..at]);
            assert!(matches!(&d[at - 1], Decision::Step { worker: w, .. } if *w == worker), "{d:?}");
            // Later, nothing that moves it; everything else kept, in order.
            let later: Vec<_> = parent.decisions[at..]
                .iter()
                .filter(|x| !matches!(x, Decision::Step { worker: w, .. } | Decision::Crash { worker: w, .. } if *w == worker))
                .cloned()
                .collect();
            assert_eq!(d[at + 1..], later[..], "lag of {worker}");
            seen.insert(worker);
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["c1", "c2", "p"], "a lag is drawn from every stepped worker");
        assert!(!lag(&mut vec![Decision::Tick { ms: 1000 }], &mut TestRunner::deterministic()), "no step, no lag");
    }
}
