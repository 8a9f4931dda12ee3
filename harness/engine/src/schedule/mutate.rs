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

/// One fresh decision of `menu`'s kind, as a generated schedule draws them.
fn fresh(menu: &Menu, runner: &mut TestRunner) -> Option<super::Decision> {
    decision(menu).new_tree(runner).ok().map(|t| t.current())
}

/// A mutation of one of `parents` (and, for a splice, of another): one of
/// - `insert`: a fresh decision at a random place;
/// - `delete`: one decision removed;
/// - `replace`: one decision replaced by a fresh one;
/// - `splice`: the first part of one parent, the rest of another;
/// - `extend`: the first part of the parent, then up to four fresh decisions.
///
/// Returns the schedule, at most `menu.decisions_max` decisions with its ticks capped as a
/// generated one's. `parents` must not be empty.
pub fn mutate<P: std::borrow::Borrow<Schedule>>(menu: &Menu, parents: &[P], runner: &mut TestRunner) -> Schedule {
    let mut d = parents[below(runner, parents.len())].borrow().decisions.clone();
    let at = |runner: &mut TestRunner, len: usize| below(runner, len + 1);
    match below(runner, 5) {
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
