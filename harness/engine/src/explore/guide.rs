//! Feedback for guided exploration (`[explore] strategy = "guided"`): a corpus
//! of the schedules that reached new coverage, in case order, and the wait that keeps
//! generation independent of how many slots run.
//!
//! A mutated case `i` is made from the corpus as it stood once every case before `i - WINDOW`
//! was taken in (in case order, as outcomes are): the same corpus whatever `--jobs` says, so
//! the same schedules, traces and verdicts. A slot about to mutate that gets ahead of the
//! consumer by more than the window waits; with fewer slots than `WINDOW`, the wait never
//! starves them. The other cases depend on their seed alone and never wait. A slot whose
//! thread is also the consumer (an exploration that idle slots help, in `crashpoint
//! catalogue`) takes the other slots' results in while it waits.

use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::schedule::{Parents, Schedule};

/// How far generation runs ahead of the feedback, cases.
pub(super) const WINDOW: u64 = 8;

/// Guided case `i` is a mutation when `i % MUTATE_OF == MUTATE_OF - 1`; the others are the
/// uniform cases in their order ([`uniform_case`]): uniform case `u` is guided case
/// `u + u / 2`. A window that uniform generation meets at its `k`-th schedule is met by
/// guided generation at its `⌊1.5 k⌋`-th at the latest, or earlier when a mutation meets it:
/// the mutated third searches around what reached new coverage, and never takes a uniform
/// case's place.
pub(super) const MUTATE_OF: u64 = 3;

/// The uniform case that guided case `index` runs, `None` for a mutation: the cases that are
/// not mutations, counted.
pub(super) fn uniform_case(index: u64) -> Option<u64> {
    (index % MUTATE_OF != MUTATE_OF - 1).then(|| index - index / MUTATE_OF)
}

#[derive(Default)]
struct State {
    /// Every case index below this one has been taken in (or belongs to another shard).
    taken: u64,
    /// (case index, schedule) of each case that added coverage, in case order.
    corpus: Vec<(u64, Arc<Schedule>)>,
    /// (case index, queue, schedule) of each case whose run had twins on a queue (the signal's
    /// `twins <queue>`), in case order, whether or not it added coverage.
    twins: Vec<(u64, String, Arc<Schedule>)>,
    /// (case index, schedule) of each case whose run had a worker ask in vain for a Redis lock
    /// another held (the signal's `contended <role>`), in case order.
    contended: Vec<(u64, Arc<Schedule>)>,
    /// Every signal element reached so far.
    seen: BTreeSet<String>,
    /// Set when the exploration stops: nobody waits any more.
    stopped: bool,
}

/// The corpus and its clock, shared by the slots and the consumer of one exploration.
#[derive(Default)]
pub(super) struct Guide {
    state: Mutex<State>,
    moved: Condvar,
}

impl Guide {
    /// The schedules of the corpus (and of the twins) that case `index` may start from: those
    /// of cases before `index - WINDOW`, once all of those were taken in. `None` when the
    /// exploration stopped meanwhile.
    /// While it waits it calls `pump` now and then, without the corpus locked: a slot whose
    /// thread also takes other slots' results in takes them there.
    pub(super) fn parents_for(&self, index: u64, pump: &mut dyn FnMut()) -> Option<Parents> {
        let horizon = index.saturating_sub(WINDOW);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while st.taken < horizon && !st.stopped {
            drop(st);
            pump();
            st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if st.taken < horizon && !st.stopped {
                st = self.moved.wait_timeout(st, Duration::from_millis(10)).unwrap_or_else(|e| e.into_inner()).0;
            }
        }
        if st.stopped && st.taken < horizon {
            return None;
        }
        Some(Parents {
            corpus: st.corpus.iter().take_while(|(i, _)| *i < horizon).map(|(_, s)| s.clone()).collect(),
            twins: st.twins.iter().take_while(|(i, _, _)| *i < horizon).map(|(_, q, s)| (q.clone(), s.clone())).collect(),
            contended: st.contended.iter().take_while(|(i, _)| *i < horizon).map(|(_, s)| s.clone()).collect(),
        })
    }

    /// Takes in case `index` (in case order): its schedule joins the corpus when its signal
    /// has an element no earlier case reached, the twins of each queue its signal names in a
    /// `twins <queue>`, and the contended when it names a `contended <role>`.
    pub(super) fn take_in(&self, index: u64, schedule: &Schedule, signal: &BTreeSet<String>) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let before = st.seen.len();
        st.seen.extend(signal.iter().cloned());
        let schedule = Arc::new(schedule.clone());
        if st.seen.len() > before {
            st.corpus.push((index, schedule.clone()));
        }
        for queue in signal.iter().filter_map(|e| e.strip_prefix("twins ")) {
            st.twins.push((index, queue.to_string(), schedule.clone()));
        }
        if signal.iter().any(|e| e.starts_with("contended ")) {
            st.contended.push((index, schedule));
        }
    }

    /// Every case index below `next` has been taken in.
    pub(super) fn taken_up_to(&self, next: u64) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.taken = st.taken.max(next);
        self.moved.notify_all();
    }

    /// The exploration stopped: wakes every slot waiting.
    pub(super) fn stop(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).stopped = true;
        self.moved.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guided_cases_run_every_uniform_case_in_order_and_at_most_half_again_later() {
        let runs: Vec<(u64, u64)> = (0..3000).filter_map(|g| uniform_case(g).map(|u| (g, u))).collect();
        // Every uniform case, once, in order.
        assert!(runs.iter().enumerate().all(|(k, (_, u))| *u == k as u64), "{:?}", &runs[..10]);
        // The k-th schedule (1-based) of uniform generation is at most the ⌊1.5 k⌋-th of guided.
        for (g, u) in &runs {
            assert!(2 * (g + 1) <= 3 * (u + 1), "uniform case {u} runs as guided case {g}");
        }
        // The others, one case in MUTATE_OF, are mutations.
        assert_eq!((0..3000).filter(|g| uniform_case(*g).is_none()).count() as u64, 3000 / MUTATE_OF);
    }
}
