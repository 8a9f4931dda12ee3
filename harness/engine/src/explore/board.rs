//! The job board of [`super::explore_each`]: its threads take explorations to start from it,
//! and once none is left to start, they help those still running by running their generated
//! cases (work sharing), so that one long exploration at the end of a catalogue does not run
//! on one slot while the others idle.
//!
//! An exploration offers its cases when it starts them ([`Board::offer`]); a thread that helps
//! runs the offered work, which takes case indices from the exploration's own counter and
//! hands the results to the exploration's consumer, in case order like any slot's. What an
//! exploration reports therefore does not depend on who helped it (see [`super::slots`]).

use std::sync::{Arc, Condvar, Mutex};

/// Work an exploration offers: runs its cases on the calling thread until it takes no more.
pub(super) type Work<'e> = Arc<dyn Fn() + Send + Sync + 'e>;

/// What a thread of [`super::explore_each`] does next.
pub(super) enum Next<'e> {
    /// Start exploration `i` (an index into the jobs).
    Start(usize),
    /// Help: run this work (the offer's ticket, and its work); once it returns, the exploration takes no more cases, and the
    /// thread withdraws the offer ([`Board::withdraw`]) so that nobody else starts it.
    Help(u64, Work<'e>),
    /// Nothing is left to start or to help: the thread ends.
    Done,
}

struct State<'e> {
    /// The next exploration to start, and how many there are.
    next: usize,
    total: usize,
    /// Explorations started and not finished.
    running: usize,
    /// Offers, oldest first, with their tickets.
    offers: Vec<(u64, Work<'e>)>,
    /// The last ticket given out (tickets count from 1).
    tickets: u64,
}

/// Explorations to start and offers of help, shared by the threads of one
/// [`super::explore_each`].
pub(super) struct Board<'e> {
    state: Mutex<State<'e>>,
    changed: Condvar,
}

impl<'e> Board<'e> {
    /// A board with `total` explorations to start, indices `0..total` in that order.
    pub(super) fn new(total: usize) -> Board<'e> {
        let state = State { next: 0, total, running: 0, offers: Vec::new(), tickets: 0 };
        Board { state: Mutex::new(state), changed: Condvar::new() }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<'e>> {
        // A panic while holding the lock leaves the state consistent: every change is one
        // assignment or one push/remove.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next thing to do: an exploration to start while any is left, else the oldest offer
    /// of help, else, while explorations still run (and may offer), waits; `Done` once nothing
    /// runs and nothing is left to start.
    pub(super) fn next(&self) -> Next<'e> {
        let mut st = self.state();
        loop {
            if st.next < st.total {
                st.next += 1;
                st.running += 1;
                return Next::Start(st.next - 1);
            }
            if let Some((ticket, work)) = st.offers.first() {
                return Next::Help(*ticket, work.clone());
            }
            if st.running == 0 {
                return Next::Done;
            }
            st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// An exploration started with [`Next::Start`] finished.
    pub(super) fn finished(&self) {
        self.state().running -= 1;
        self.changed.notify_all();
    }

    /// No exploration not yet started will start (the consumer stopped on an error).
    pub(super) fn stop(&self) {
        let mut st = self.state();
        st.next = st.total;
        drop(st);
        self.changed.notify_all();
    }

    /// Offers `work` to idle threads; returns the ticket to withdraw it with.
    pub(super) fn offer(&self, work: Work<'e>) -> u64 {
        let mut st = self.state();
        st.tickets += 1;
        let ticket = st.tickets;
        st.offers.push((ticket, work));
        drop(st);
        self.changed.notify_all();
        ticket
    }

    /// Withdraws offer `ticket` (if still there): no thread starts helping it any more. Threads
    /// already running its work finish it.
    pub(super) fn withdraw(&self, ticket: u64) {
        self.state().offers.retain(|(t, _)| *t != ticket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A board of `total` explorations whose first has started.
    fn started<'e>(total: usize) -> Board<'e> {
        let board = Board::new(total);
        assert!(matches!(board.next(), Next::Start(0)));
        board
    }

    /// Finishes `running` explorations, after which the board has nothing left.
    fn finish(board: &Board, running: usize) {
        (0..running).for_each(|_| board.finished());
        assert!(matches!(board.next(), Next::Done));
    }

    #[test]
    fn explorations_start_in_order_then_offers_are_helped_then_it_is_done() {
        let runs = AtomicUsize::new(0);
        let board = started(2);
        assert!(matches!(board.next(), Next::Start(1)));
        let ticket = board.offer(Arc::new(|| {
            runs.fetch_add(1, Ordering::Relaxed);
        }));
        match board.next() {
            Next::Help(t, work) => {
                assert_eq!(t, ticket);
                work();
                board.withdraw(t);
            }
            _ => panic!("expected the offer"),
        }
        assert_eq!(runs.load(Ordering::Relaxed), 1);
        finish(&board, 2);
    }

    #[test]
    fn an_idle_thread_waits_for_a_running_exploration_and_ends_when_it_finishes() {
        let board = started(1);
        std::thread::scope(|scope| {
            let idle = scope.spawn(|| matches!(board.next(), Next::Done));
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!idle.is_finished(), "an idle thread ended while an exploration still ran");
            board.finished();
            assert!(idle.join().unwrap());
        });
    }

    #[test]
    fn a_stop_drops_the_explorations_not_started() {
        let board = started(3);
        board.stop();
        finish(&board, 1);
    }

    #[test]
    fn a_withdrawn_offer_is_not_handed_out() {
        let board = started(1);
        let ticket = board.offer(Arc::new(|| {}));
        board.withdraw(ticket);
        finish(&board, 1);
    }
}
