//! Several explorations at once: each system (a mutant, or the reference) explores its
//! scenario on one slot, so that one system's shrinking, which is sequential, overlaps
//! another's search, and slots with no exploration left to start help those still searching.
//! What `crashpoint catalogue` and the catalogue tests run.

use anyhow::Result;

use super::board::{Board, Next};
use super::{explore_on, Options, Report};
use crate::scenario::{self, Scenario};
use crate::services::Endpoints;

/// One exploration to run: `system` (a name of the scenario's workload, e.g. `no-dedup`) on
/// `scenario` with `options` (its budget and seed; its `jobs` is ignored: each exploration
/// starts on one slot, and idle slots may help it).
#[derive(Debug, Clone)]
pub struct Job<'a> {
    /// The system's name in the scenario's workload.
    pub system: &'a str,
    /// The exploration scenario (it must have an `[explore]` table).
    pub scenario: &'a Scenario,
    /// Budget and seed of this exploration.
    pub options: Options,
}

/// Explores every job, `slots` at a time (each on one slot), and calls `each` with every
/// result in the order of `jobs`, as soon as it and those before it are done. Once no job is
/// left to start, idle slots help the explorations still running by running their generated
/// cases ([`super::board`]). With budgets in schedules the results do not depend on `slots`:
/// each exploration's cases have their own seeds and reach its consumer in case order,
/// whichever slot ran them (a budget in time does: explorations sharing the cores fit fewer).
/// A system that does not resolve, a service failure or a panic inside an exploration is that
/// job's `Err`. When a job's scenario has external worker processes, whose step timeouts
/// assume an unloaded machine, the explorations run one at a time. Stops at the first error
/// `each` returns (explorations already running finish, unreported) and returns it.
pub fn explore_each<'a>(
    endpoints: &Endpoints,
    jobs: &[Job<'a>],
    slots: usize,
    mut each: impl FnMut(&Job<'a>, Result<Report>) -> Result<()>,
) -> Result<()> {
    let board = Board::new(jobs.len());
    let (tx, rx) = std::sync::mpsc::channel();
    let slots = match jobs.iter().any(|j| !j.scenario.external.is_empty()) {
        true => 1,
        // More threads than jobs help the last ones: they wait on the board for offers and
        // end when no exploration runs any more.
        false => slots.max(1),
    };
    std::thread::scope(|scope| {
        for _ in 0..slots {
            let (tx, board) = (tx.clone(), &board);
            scope.spawn(move || loop {
                match board.next() {
                    Next::Start(i) => {
                        let job = &jobs[i];
                        let one = Options { jobs: 1, ..job.options.clone() };
                        let r = super::slots::guarded(&format!("exploring {}", job.system), || {
                            let system = scenario::system_of(job.scenario, job.system)?;
                            explore_on(endpoints, system, job.scenario, &one, Some(board), |_| {})
                        });
                        board.finished();
                        if tx.send((i, r)).is_err() {
                            return;
                        }
                    }
                    Next::Help(ticket, work) => {
                        work();
                        board.withdraw(ticket);
                    }
                    Next::Done => return,
                }
            });
        }
        drop(tx);
        let mut order = super::reorder::InOrder::new();
        for (i, r) in rx {
            for (i, r) in order.put(i as u64, r, |_| false) {
                if let Err(e) = each(&jobs[i as usize], r) {
                    board.stop();
                    return Err(e);
                }
            }
        }
        Ok(())
    })
}
