//! Exhaustive mode: every interleaving of the calls of a few workers, as PostgreSQL's
//! isolationtester runs every permutation.
//!
//! Stateless depth-first search with replay: each run follows forced choices, then always the
//! first enabled choice to the end, recording what else was enabled at each new position; each
//! alternative becomes a forced prefix for a later run. Every complete interleaving runs
//! exactly once, on the real services, followed by the drain and the checker.

use std::rc::Rc;
use std::time::Instant;

use anyhow::{anyhow, Result};

use super::Stats;
use crate::scenario::{run_driven, Scenario, ScenarioOutcome};
use crate::schedule::{Decision, Schedule};
use crate::services::Endpoints;
use crate::sim::cx::System;

/// Most interleavings enumerated before giving up (a guard against a runaway scenario).
pub const INTERLEAVINGS_MAX: u64 = 20_000;

/// The result of an enumeration.
#[derive(Debug)]
pub struct Enumeration {
    /// Schedules run, calls, coverage, wall time.
    pub stats: Stats,
    /// Interleavings with a crash among them.
    pub with_crash: u64,
    /// The first violating interleaving, if any.
    pub failure: Option<ScenarioOutcome>,
}

/// Enumerates scenario `s` (which must have an `[exhaustive]` table) on `system`.
/// `progress` is called after every interleaving. Errors: a service failure.
pub fn enumerate(
    endpoints: &Endpoints,
    system: Rc<dyn System>,
    s: &Scenario,
    mut progress: impl FnMut(&Stats),
) -> Result<Enumeration> {
    let spec = s.exhaustive.as_ref().ok_or_else(|| anyhow!("{} has no [exhaustive] table", s.name))?;
    let workers: Vec<String> = spec.workers.split_whitespace().map(str::to_string).collect();
    let started = Instant::now();
    let mut stats = Stats::new(s.workload.as_ref());
    let mut with_crash = 0;
    let mut todo: Vec<Vec<Option<Decision>>> = vec![vec![]];
    while let Some(forced) = todo.pop() {
        if stats.schedules >= INTERLEAVINGS_MAX {
            return Err(anyhow!("{}: more than {INTERLEAVINGS_MAX} interleavings", s.name));
        }
        // `None` is "stop here": offered when only crashes remain, so that every interleaving
        // also runs without a crash.
        let mut enabled_at: Vec<Vec<Option<Decision>>> = Vec::new();
        let mut path: Vec<Option<Decision>> = Vec::new();
        let outcome = run_driven(endpoints, system.clone(), s, |run| {
            for d in &s.schedule.decisions {
                run.apply(d)?;
            }
            let mut crashed = false;
            loop {
                let mut enabled: Vec<Option<Decision>> =
                    run.choices(&workers, spec.crash && !crashed).into_iter().map(Some).collect();
                if !enabled.iter().flatten().any(|d| matches!(d, Decision::Step { .. })) && !enabled.is_empty() {
                    enabled.insert(0, None);
                }
                let Some(first) = enabled.first().cloned() else { break };
                let choice = forced.get(path.len()).cloned().unwrap_or(first);
                enabled_at.push(enabled);
                path.push(choice.clone());
                let Some(d) = choice else { break };
                run.apply(&d)?;
                crashed |= matches!(d, Decision::Crash { .. });
            }
            let mut decisions = s.schedule.decisions.clone();
            decisions.extend(path.iter().flatten().cloned());
            Ok(Schedule { decisions })
        })?;
        for i in (forced.len()..path.len()).rev() {
            for alt in enabled_at[i].iter().skip(1) {
                let mut next = path[..i].to_vec();
                next.push(alt.clone());
                todo.push(next);
            }
        }
        stats.record(&outcome);
        with_crash += u64::from(path.iter().flatten().any(|d| matches!(d, Decision::Crash { .. })));
        progress(&stats);
        if !outcome.passed() {
            stats.wall = started.elapsed();
            return Ok(Enumeration { stats, with_crash, failure: Some(outcome) });
        }
    }
    stats.wall = started.elapsed();
    Ok(Enumeration { stats, with_crash, failure: None })
}
