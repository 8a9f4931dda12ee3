//! Exploration: generated schedules against real services, shrinking a failure to a minimal
//! schedule, determinism self-check, crash-point coverage and throughput.
//!
//! Each generated schedule has its own case seed, derived from the run seed and its index, so
//! `crashpoint repro SCENARIO --seed CASE_SEED` regenerates exactly that schedule. A failure
//! shrinks by deleting decisions (`ddmin`, in `shrink`), every candidate run on the real
//! services. Minimal failures of the reference system are appended to
//! `<scenario>.regressions` next to the scenario file, and re-tried first by later runs.

mod board;
pub mod exhaustive;
mod guide;
mod reorder;
mod each;
mod regressions;
mod shard;
mod shrink;
mod signal;
mod slots;
mod stats;

use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Result;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

pub use each::{explore_each, Job};
pub use shard::{for_shard, Shard};
pub use slots::default_jobs;
pub use stats::{Case, Coverage, Determinism, Stats};
#[cfg(feature = "internals")]
pub use stats::schedule_id;

use crate::scenario::{run_scenario, Scenario, ScenarioOutcome};
use crate::schedule::{schedules, Menu, Schedule};
use crate::services::Endpoints;
use crate::sim::cx::System;

/// Most candidate schedules tried while shrinking one failure.
pub const SHRINK_RUNS_MAX: usize = 400;

/// How much to explore.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Stop after this many schedules.
    pub schedules: Option<u64>,
    /// Stop after this much wall time.
    pub time: Option<Duration>,
    /// The run seed.
    pub seed: u64,
    /// Run every schedule twice and compare the traces byte for byte.
    pub check_determinism: bool,
    /// This job's shard: it runs the cases (and saved regressions) whose index it owns.
    pub shard: Shard,
    /// Schedules run at once, in parallel slots (0 or 1: one at a time). The results do not
    /// depend on it: outcomes are taken in case order (`slots`).
    pub jobs: usize,
}

/// A failing schedule and its minimal form.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Case seed of the generated schedule (`None` for a regression re-tried from file).
    pub case_seed: Option<u64>,
    /// Whether the case was a mutation of earlier cases (guided exploration): its case seed
    /// drew the mutation, and `repro --seed`, which generates afresh, cannot rebuild it.
    pub mutation: bool,
    /// Schedules run before this one failed (1-based index of the failing schedule).
    pub schedules_until: u64,
    /// The schedule as first found.
    pub original: Schedule,
    /// The shrunk schedule's outcome (its schedule is the minimal one).
    pub minimal: ScenarioOutcome,
    /// Candidate schedules run while shrinking.
    pub shrink_runs: usize,
    /// Set when the failure is a determinism mismatch: the first divergent trace line.
    pub divergence: Option<String>,
    /// Wall time from the start of the exploration until the failing schedule was checked,
    /// before shrinking (not part of any report that must repeat: it is wall time).
    pub found_after: Duration,
}

impl Failure {
    /// The case seed that `repro --seed` rebuilds the schedule as found from: the case seed,
    /// unless the case was a mutation (or a saved regression, which has none).
    pub fn repro_seed(&self) -> Option<u64> {
        self.case_seed.filter(|_| !self.mutation)
    }
}

/// The result of an exploration.
#[derive(Debug)]
pub struct Report {
    /// Schedules run (shrinking excluded), coverage, calls and wall time.
    pub stats: Stats,
    /// The first failure, shrunk.
    pub failure: Option<Failure>,
}

/// The seed of case `index` of a run seeded `seed` (splitmix64).
pub fn case_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(index + 1));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Per role prefix, the boundaries after the calls its workers make: what
/// `[explore] call_boundaries` adds to the menu ([`Menu::calls`]).
pub type Calls = std::collections::BTreeMap<String, Vec<crate::spec::CrashPoint>>;

/// The call boundaries of scenario `s` on `system`: per role that may crash (not a periodic
/// one) that wants them, `after_<label>` for each call its workers make when the scenario runs
/// with no decision, the drain alone, in the order first made. Every such role wants them when
/// the `[explore]` table says `call_boundaries = true`; a team's process declared without a
/// `points` list (an external role with no crash point) wants them always, so that crashes
/// and failures reach the place after each of its calls. Empty when no role wants them.
/// Deterministic as every run is: the same for every slot, shard and `repro --seed`. Errors:
/// the services'.
pub fn call_boundaries(endpoints: &Endpoints, system: Rc<dyn System>, s: &Scenario) -> Result<Calls> {
    let mut calls = Calls::new();
    let all = s.explore.as_ref().is_some_and(|e| e.call_boundaries);
    let roles = s.workload.roles();
    let external = |r: &crate::spec::RoleSpec| s.external.iter().any(|e| e.role == r.prefix);
    let wants = |r: &crate::spec::RoleSpec| r.kind != crate::spec::RoleKind::Periodic && (all || r.points.is_empty() && external(r));
    if !roles.iter().any(wants) {
        return Ok(calls);
    }
    let o = run_scenario(endpoints, system, s, Some(&Schedule::default()))?;
    for step in o.history.steps() {
        let Some(role) = crate::spec::role_of(&roles, &step.worker).filter(|r| wants(r)) else {
            continue;
        };
        let cp = crate::spec::after_call(&step.op);
        let points = calls.entry(role.prefix.to_string()).or_default();
        if !points.contains(&cp) {
            points.push(cp);
        }
    }
    Ok(calls)
}

fn menu(s: &Scenario, calls: &Calls) -> Menu {
    Menu {
        calls: calls.clone(),
        workers: s.workers.clone(),
        events: s.event_names.clone(),
        decisions_max: s.explore.as_ref().map(|e| e.decisions_max).unwrap_or(24),
        sqs_faults: s.explore.as_ref().is_some_and(|e| e.sqs_faults),
        pg_faults: s.explore.as_ref().is_some_and(|e| e.pg_faults),
        redis_faults: s.explore.as_ref().is_none_or(|e| e.redis_faults),
        redrive: s.dead_letter.is_some(),
        stops: s.explore.as_ref().is_some_and(|e| e.stops),
        applied: s.explore.as_ref().map(|e| e.applied.clone()).unwrap_or_default(),
        worker_weights: s.explore.as_ref().map(|e| e.worker_weights.clone()).unwrap_or_default(),
        vocabulary: crate::schedule::Vocabulary::of(s.workload.as_ref()),
        concurrent: s
            .workers
            .iter()
            .filter(|w| s.external.iter().any(|e| e.concurrent && crate::spec::role_of(&s.workload.roles(), w).is_some_and(|r| r.prefix == e.role)))
            .cloned()
            .collect(),
        clock_max_ms: crate::schedule::clock_max_ms(
            crate::scenario::queues(s).iter().map(|q| q.retention_s.saturating_mul(1000)).min().unwrap_or(u64::MAX),
        ),
    }
}

fn runner_for(case_seed: u64) -> TestRunner {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&case_seed.to_le_bytes());
    bytes[8..16].copy_from_slice(&(!case_seed).to_le_bytes());
    TestRunner::new_with_rng(Config::default(), TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

/// The schedule generated for `case_seed` in scenario `s` with the call boundaries `calls`
/// ([`call_boundaries`]; what `repro --seed` runs).
pub fn generate(s: &Scenario, calls: &Calls, case_seed: u64) -> Result<Schedule> {
    let tree = schedules(&menu(s, calls)).new_tree(&mut runner_for(case_seed)).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(tree.current())
}

/// The first line where two traces differ, as `line N: <a> ≠ <b>`.
pub fn first_divergence(a: &str, b: &str) -> Option<String> {
    let (mut la, mut lb) = (a.lines(), b.lines());
    for n in 1.. {
        match (la.next(), lb.next()) {
            (None, None) => return None,
            (x, y) if x == y => continue,
            (x, y) => return Some(format!("line {n}: {:?} ≠ {:?}", x.unwrap_or("<end>"), y.unwrap_or("<end>"))),
        }
    }
    None
}

struct Explorer<'a> {
    endpoints: &'a Endpoints,
    system: Rc<dyn System>,
    scenario: &'a Scenario,
    stats: Stats,
}

impl Explorer<'_> {
    fn run(&mut self, schedule: &Schedule) -> Result<ScenarioOutcome> {
        run_scenario(self.endpoints, self.system.clone(), self.scenario, Some(schedule))
    }
}

/// Explores scenario `s` (which must have an `[explore]` table) on `system` within `opts`'
/// budget. Regressions saved for the reference system are re-tried first. `progress` is
/// called after every schedule. Errors: a service failure (not a verdict).
pub fn explore(
    endpoints: &Endpoints,
    system: Rc<dyn System>,
    s: &Scenario,
    opts: &Options,
    progress: impl FnMut(&Stats),
) -> Result<Report> {
    explore_on(endpoints, system, s, opts, None, progress)
}

/// [`explore`], offering the generated cases to the idle threads of `board` (those of
/// [`explore_each`]) when there is one.
fn explore_on<'e>(
    endpoints: &'e Endpoints,
    system: Rc<dyn System>,
    s: &'e Scenario,
    opts: &Options,
    board: Option<&board::Board<'e>>,
    mut progress: impl FnMut(&Stats),
) -> Result<Report> {
    let started = Instant::now();
    let persist = system.name() == "reference";
    let mut ex = Explorer { endpoints, system, scenario: s, stats: Stats::new(s.workload.as_ref()) };
    let saved = regressions::load(s, ex.system.name())?;
    for schedule in saved.into_iter().enumerate().filter(|(k, _)| opts.shard.owns(*k as u64)).map(|(_, r)| r) {
        let o = ex.run(&schedule)?;
        ex.stats.record(&o);
        if !o.passed() {
            ex.stats.wall = started.elapsed();
            let failure = Failure {
                case_seed: None,
                mutation: false,
                schedules_until: ex.stats.schedules,
                original: schedule,
                minimal: o,
                shrink_runs: 0,
                divergence: None,
                found_after: started.elapsed(),
            };
            return Ok(Report { stats: ex.stats, failure: Some(failure) });
        }
    }
    let mut failure = None;
    let system = ex.system.clone();
    let calls = call_boundaries(endpoints, system.clone(), s)?;
    slots::run_cases(endpoints, &system, s, opts, &calls, started, board, |mut ran| {
        ex.stats.cases.push(Case { index: ran.index, case_seed: ran.seed, schedule: stats::schedule_id(&ran.schedule) });
        ex.stats.record_with(&ran.outcome, std::mem::take(&mut ran.signal));
        if let Some(how) = ran.kept_differs.take() {
            ex.stats.kept_differed(how);
        }
        if opts.check_determinism {
            Determinism::count(&mut ex.stats.determinism, ran.divergence.is_none());
        }
        progress(&ex.stats);
        if ran.outcome.passed() && ran.divergence.is_none() {
            return Ok(true);
        }
        let schedules_until = ex.stats.schedules;
        let found_after = started.elapsed();
        let (minimal, shrink_runs) = if ran.divergence.is_some() {
            (ran.outcome, 0)
        } else {
            shrink::shrink(endpoints, &system, s, opts.jobs, ran.outcome)?
        };
        if persist && ran.divergence.is_none() {
            regressions::save(s, "reference", &minimal)?;
        }
        let (case_seed, mutation, original, divergence) = (Some(ran.seed), ran.mutation, ran.schedule, ran.divergence);
        failure = Some(Failure { case_seed, mutation, schedules_until, original, minimal, shrink_runs, divergence, found_after });
        Ok(false)
    })?;
    ex.stats.wall = started.elapsed();
    Ok(Report { stats: ex.stats, failure })
}
