//! Several explorations at once: each system (a mutant, or the reference) explores its
//! scenario on one slot, so that one system's shrinking, which is sequential, overlaps
//! another's search. What `crashpoint catalogue` and the catalogue tests run.

use anyhow::Result;

use super::{explore, Options, Report};
use crate::scenario::{self, Scenario};
use crate::services::Endpoints;

/// One exploration to run: `system` (a name of the scenario's workload, e.g. `no-dedup`) on
/// `scenario` with `options` (its budget and seed; its `jobs` is ignored, each exploration
/// runs on one slot).
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
/// result in the order of `jobs`, as soon as it and those before it are done. With budgets in
/// schedules the results do not depend on `slots`: each exploration runs alone on its slot,
/// with its own seed (a budget in time does: explorations sharing the cores fit fewer). A
/// system that does not resolve, a service failure or a panic inside an exploration is that
/// job's `Err`. Stops at the first error `each` returns (explorations already running finish,
/// unreported) and returns it.
pub fn explore_each<'a>(
    endpoints: &Endpoints,
    jobs: &[Job<'a>],
    slots: usize,
    mut each: impl FnMut(&Job<'a>, Result<Report>) -> Result<()>,
) -> Result<()> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..slots.clamp(1, jobs.len().max(1)) {
            let (tx, next) = (tx.clone(), &next);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { return };
                let one = Options { jobs: 1, ..job.options.clone() };
                let r = super::slots::guarded(&format!("exploring {}", job.system), || {
                    scenario::system_of(job.scenario, job.system).and_then(|system| explore(endpoints, system, job.scenario, &one, |_| {}))
                });
                if tx.send((i, r)).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        let mut order = super::in_order::InOrder::new();
        for (i, r) in rx {
            for (i, r) in order.put(i as u64, r, |_| false) {
                if let Err(e) = each(&jobs[i as usize], r) {
                    next.store(jobs.len(), Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(())
    })
}
