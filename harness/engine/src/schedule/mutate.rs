//! Mutations of schedules, for guided exploration: a schedule that reached new
//! coverage is changed a little, in the manner of AFL's havoc stage and of Zest's
//! mutations of a generator's choices (Padhye et al., ISSTA 2019), so that its neighbours are
//! tried before the rest of the space.
//!
//! Every draw comes from the case's own proptest runner (seeded by its case seed), so a
//! mutation is as deterministic as a fresh schedule.

use std::sync::Arc;

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

use super::strategy::{cap_ticks, decision};
use super::{Decision, Menu, Schedule, LAG_BEFORE};
use crate::spec::RoleKind;

/// A number in `0..n` (`n` > 0), drawn from `runner`.
fn below(runner: &mut TestRunner, n: usize) -> usize {
    (0..n).new_tree(runner).map(|t| t.current()).unwrap_or(0)
}

/// `d` with `lag` at `i` and the decisions after `i` that move a worker it names left out: a
/// step, crash, failure or stop (a restart or another lag does not move it).
fn fall_behind(d: &mut Vec<Decision>, i: usize, lag: Decision) {
    let moves = |x: &Decision| {
        x.worker().is_some_and(|w| lag.names(w)) && !matches!(x, Decision::Restart { .. } | Decision::Lag { .. })
    };
    let rest: Vec<Decision> = d.drain(i..).filter(|x| !moves(x)).collect();
    d.push(lag);
    d.extend(rest);
}

/// Makes the worker of one of `d`'s steps fall behind right after it: inserts `<worker>:lag`
/// there and removes the later decisions that move that worker. `false` (and `d` unchanged)
/// when `d` has no step.
fn lag(d: &mut Vec<Decision>, runner: &mut TestRunner) -> bool {
    let steps: Vec<usize> = (0..d.len()).filter(|i| matches!(d[*i], Decision::Step { .. })).collect();
    if steps.is_empty() {
        return false;
    }
    let i = steps[below(runner, steps.len())];
    let Some(worker) = d[i].worker().map(str::to_string) else {
        return false;
    };
    fall_behind(d, i + 1, Decision::Lag { worker, before: LAG_BEFORE.into() });
    true
}

/// Makes every handler of `queue` fall behind before its next receive, at a random place of
/// `d`: inserts `<role>:lag@recv` for the role that handles it (`c:lag@recv`: every worker of
/// `c`) and removes the later decisions that move them. In the drain the producers, relays and
/// nemesis settle first, and the first handler to catch up receives together what they left
/// visible (two deliveries of one event in one batch). `false` (and `d` unchanged) when no role
/// of the menu handles `queue`.
fn gather(menu: &Menu, queue: &str, d: &mut Vec<Decision>, runner: &mut TestRunner) -> bool {
    let Some(role) = menu.vocabulary.roles.iter().find(|r| matches!(r.kind, RoleKind::Handler { queue: q } if q == queue)) else {
        return false;
    };
    let i = below(runner, d.len() + 1);
    fall_behind(d, i, Decision::Lag { worker: role.prefix.to_string(), before: "recv".into() });
    true
}

/// What a mutation starts from.
#[derive(Debug, Clone, Default)]
pub struct Parents {
    /// The schedules that reached new coverage, in case order.
    pub corpus: Vec<Arc<Schedule>>,
    /// Every schedule whose run had two messages of one identity on a queue at once, neither
    /// deleted (the signal's `twins <queue>`), with that queue, in case order: the parents of
    /// `gather`.
    pub twins: Vec<(String, Arc<Schedule>)>,
    /// Every schedule whose run had a worker ask in vain for a Redis lock that another held
    /// (the signal's `contended <role>`), in case order: the parents of `contend`.
    pub contended: Vec<Arc<Schedule>>,
}

/// Of the mutations made while some parent had a contended lock, one in this many is a
/// `contend`.
const CONTEND_OF: usize = 4;

/// Arms `redis:lose-lock` at a random place of `d`: the next lock asked for in vain after it is
/// lost first, and its asker takes it.
fn contend(d: &mut Vec<Decision>, runner: &mut TestRunner) {
    let i = below(runner, d.len() + 1);
    d.insert(i, Decision::Redis(crate::nemesis::redis::RedisFault::LoseLock));
}

/// One fresh decision of `menu`'s kind, as a generated schedule draws them.
fn fresh(menu: &Menu, runner: &mut TestRunner) -> Option<Decision> {
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
///   first to commit last, which uniform steps rarely give;
/// - `gather`: of a parent that had two messages of one identity on a queue at once, every
///   handler of that queue falls behind before its next receive (`c:lag@recv`, for role `c`)
///   at a random place, and the parent's later decisions that move them are left out: in the
///   drain the first to catch up receives at once what the others left visible. Windows of
///   batches (two deliveries of one event in one receive) need the copies received together,
///   where uniform steps receive each as soon as it is sent. Without such a parent (of a
///   queue some worker handles), an `extend`;
/// - `contend`: of a parent in which a worker asked in vain for a Redis lock another held,
///   `redis:lose-lock` armed at a random place: the lock is lost as its asker comes, while its
///   holder may still be between its calls under it (a lock's TTL passing during a pause, a
///   failover). Drawn first, one mutation in [`CONTEND_OF`], and only when such a parent
///   exists and the menu has the Redis faults: the mutations of a workload whose locks are
///   never contended are as before.
///
/// Returns the schedule, at most `menu.decisions_max` decisions with its ticks capped as a
/// generated one's. `parents.corpus` must not be empty.
pub fn mutate(menu: &Menu, parents: &Parents, runner: &mut TestRunner) -> Schedule {
    let corpus = &parents.corpus;
    if menu.redis_faults && !parents.contended.is_empty() && below(runner, CONTEND_OF) == 0 {
        let mut d = parents.contended[below(runner, parents.contended.len())].decisions.clone();
        d.truncate(menu.decisions_max.saturating_sub(1));
        contend(&mut d, runner);
        return Schedule { decisions: cap_ticks(d, menu.clock_max_ms) };
    }
    let mut d = corpus[below(runner, corpus.len())].decisions.clone();
    let at = |runner: &mut TestRunner, len: usize| below(runner, len + 1);
    // The queues with twins that a worker of the menu handles, each once.
    let mut queues: Vec<&str> = parents.twins.iter().map(|(q, _)| q.as_str()).collect();
    queues.sort_unstable();
    queues.dedup();
    queues.retain(|q| menu.vocabulary.roles.iter().any(|r| matches!(r.kind, RoleKind::Handler { queue } if queue == *q)));
    match below(runner, 7) {
        5 if lag(&mut d, runner) => {}
        6 if !queues.is_empty() => {
            // A queue first, then one of its parents: each queue as likely, however often
            // its copies come up.
            let queue = queues[below(runner, queues.len())];
            let of: Vec<&Arc<Schedule>> = parents.twins.iter().filter(|(q, _)| q == queue).map(|(_, s)| s).collect();
            d = of[below(runner, of.len())].decisions.clone();
            gather(menu, queue, &mut d, runner);
        }
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
        3 if corpus.len() > 1 => {
            let other = &corpus[below(runner, corpus.len())].decisions;
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
            let Decision::Lag { worker, before } = d[at].clone() else { unreachable!() };
            assert_eq!(before, "commit");
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

    #[test]
    fn a_contend_arms_one_lost_lock_in_a_parent_that_had_a_lock_asked_for_in_vain() {
        let menu = crate::schedule::strategy::tests::menu();
        let parent = Arc::new(crate::schedule::parse("p c1 c2 tick:31s c1", &vocabulary()).unwrap());
        let lose = Decision::Redis(crate::nemesis::redis::RedisFault::LoseLock);
        let parents = Parents { corpus: vec![parent.clone()], contended: vec![parent.clone()], ..Parents::default() };
        let mut places = std::collections::BTreeSet::new();
        for seed in 0..64u8 {
            let mut runner = TestRunner::new_with_rng(Default::default(), proptest::test_runner::TestRng::from_seed(proptest::test_runner::RngAlgorithm::ChaCha, &[seed; 32]));
            let d = mutate(&menu, &parents, &mut runner).decisions;
            // A contend: the parent, in order, with one `redis:lose-lock` more.
            let Some(at) = d.iter().position(|x| *x == lose) else { continue };
            let mut rest = d.clone();
            rest.remove(at);
            if rest == parent.decisions {
                places.insert(at);
            }
        }
        assert!(places.len() > 2, "contends armed the fault at {places:?} only");
        let mut d = parent.decisions.clone();
        contend(&mut d, &mut TestRunner::deterministic());
        assert_eq!(d.iter().filter(|x| **x == lose).count(), 1);
    }

    #[test]
    fn a_gather_holds_every_handler_of_one_queue_before_its_receive_and_leaves_out_what_moves_them() {
        let menu = crate::schedule::strategy::tests::menu();
        let parent = crate::schedule::parse("p c1 d1 c2:crash c3 tick:31s c2:restart c1 p d1", &vocabulary()).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..40u8 {
            let mut runner = TestRunner::new_with_rng(Default::default(), proptest::test_runner::TestRng::from_seed(proptest::test_runner::RngAlgorithm::ChaCha, &[seed; 32]));
            let mut d = parent.decisions.clone();
            let queue = ["q", "q2"][usize::from(seed % 2)];
            assert!(gather(&menu, queue, &mut d, &mut runner));
            let at = d.iter().position(|x| matches!(x, Decision::Lag { .. })).unwrap();
            // The role that handles the queue (`c` on q, or `d` on q2), before its receive.
            let role = if queue == "q" { "c" } else { "d" };
            assert_eq!(d[at].to_string(), format!("{role}:lag@recv"));
            assert_eq!(d[..at], parent.decisions[..at]);
            // Later, nothing that moves a worker of the role (a restart does not); everything
            // else kept, in order.
            let later: Vec<_> = parent.decisions[at..]
                .iter()
                .filter(|x| matches!(x, Decision::Restart { .. }) || !x.worker().is_some_and(|w| crate::schedule::member_of(w, role)))
                .cloned()
                .collect();
            assert_eq!(d[at + 1..], later[..], "{role} at {at}");
            seen.insert(role);
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["c", "d"], "either queue's handlers");
        assert!(!gather(&menu, "q9", &mut vec![], &mut TestRunner::deterministic()), "no handler, no gather");
    }
}
