//! The run report as data: what `report.json` holds, and what `junit.xml`, `summary.md` and
//! the timelines are rendered from. Its schema is documented in docs/guide/ci-gate.md ("report.json").
//!
//! Everything here is deterministic for a given seed, budget in schedules and shard, except
//! the wall-clock fields (`wall_s`, `schedules_per_s`) and `started_at`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::checker::Verdict;
pub use crate::explore::Case;
use crate::explore::{Coverage, Report, Stats};
use crate::explore::exhaustive::Enumeration;
use crate::scenario::{Scenario, ScenarioOutcome};
use crate::schedule::Schedule;

/// Version of the `report.json` schema; bumped on an incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// A whole `crashpoint run` (or `catalogue`).
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// crashpoint's version.
    pub crashpoint: &'static str,
    /// The command that produced it, e.g. `run` or `catalogue`.
    pub command: String,
    /// The run seed.
    pub seed: u64,
    /// The exploration budget.
    pub budget: Budget,
    /// This job's shard, 1-based (`1/1` when not sharded).
    pub shard: ShardInfo,
    /// Start, RFC 3339 wall-clock time.
    pub started_at: String,
    /// Wall time of the whole run, s.
    pub wall_s: f64,
    /// `pass` when every scenario passed, else `fail`.
    pub verdict: Outcome,
    /// One entry per scenario run (per system, for the catalogue).
    pub scenarios: Vec<ScenarioReport>,
    /// The SQS endpoint's calibration (`null` with `--no-calibrate`).
    pub calibration: Option<crate::services::calibrate::Calibration>,
    /// Caveats for the whole run (endpoint calibration mismatches, failed probes).
    pub caveats: Vec<String>,
    /// A harness or services error that ended the run early (exit 2); the scenarios before
    /// it are reported.
    pub error: Option<String>,
}

/// The exploration budget: schedules, or wall time, or both (whichever ends first).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Budget {
    /// Most schedules per exploration scenario, before sharding.
    pub schedules: Option<u64>,
    /// Most wall time per exploration scenario, s.
    pub seconds: Option<f64>,
}

/// `index/count`, 1-based.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ShardInfo {
    /// This shard, 1..=count.
    pub index: u64,
    /// Number of shards.
    pub count: u64,
}

/// Pass or fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Every invariant held.
    Pass,
    /// An invariant was violated (or a trace was not deterministic).
    Fail,
}

impl Outcome {
    fn of(ok: bool) -> Self {
        if ok { Outcome::Pass } else { Outcome::Fail }
    }
}

/// How a scenario's schedules were chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Its own schedule, once.
    Scripted,
    /// Generated schedules within the budget.
    Explored,
    /// Every interleaving.
    Exhaustive,
    /// One schedule given to `crashpoint repro`.
    Repro,
}

/// Real calls: totals and means per schedule.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Calls {
    /// PostgreSQL statements, summed over the schedules.
    pub pg: u64,
    /// SQS API calls, summed.
    pub sqs: u64,
    /// Redis commands, summed.
    pub redis: u64,
    /// Mean PostgreSQL statements per schedule.
    pub pg_per_schedule: f64,
    /// Mean SQS calls per schedule.
    pub sqs_per_schedule: f64,
    /// Mean Redis commands per schedule.
    pub redis_per_schedule: f64,
    /// HTTP requests to the workload's providers over the simulated network, summed (absent
    /// for a workload without providers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<u64>,
}

/// One invariant's result.
#[derive(Debug, Clone, Serialize)]
pub struct InvariantResult {
    /// Its name.
    pub invariant: String,
    /// Whether it held (in every schedule of the scenario).
    pub holds: bool,
    /// What was found (labels), empty when it holds.
    pub detail: String,
}

/// The failure of a scenario: the minimal schedule and how to reproduce it.
#[derive(Debug, Clone, Serialize)]
pub struct FailureReport {
    /// The minimal schedule, in text form.
    pub schedule: String,
    /// The schedule as first found (before shrinking).
    pub original: String,
    /// Case seed of the schedule as found (`None` for scripted schedules and saved regressions).
    pub case_seed: Option<u64>,
    /// 1-based index of the failing schedule within the scenario's run.
    pub schedules_until: u64,
    /// Candidate schedules run while shrinking.
    pub shrink_runs: u64,
    /// The violated invariants, `name: detail`.
    pub violated: Vec<String>,
    /// For a determinism failure: the first divergent trace line.
    pub divergence: Option<String>,
    /// The trace line (trimmed) of the step where the first violated invariant broke.
    pub breaking_step: Option<String>,
    /// The minimal schedule's trace.
    pub trace: String,
    /// Commands that reproduce it.
    pub repro: Vec<String>,
    /// The timeline file in the report directory, e.g. `timeline-payout-explore.html`.
    pub timeline: Option<String>,
}

/// One scenario's result.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    /// Scenario name, e.g. `payout/explore`.
    pub name: String,
    /// System under test (`reference` or a mutant).
    pub system: String,
    /// Scripted, explored or exhaustive.
    pub kind: Kind,
    /// Pass or fail.
    pub verdict: Outcome,
    /// The verdict wanted: `pass`, or `fail` for a mutant of the catalogue (it must be caught).
    pub expected: Outcome,
    /// Schedules run (shrinking and determinism reruns excluded).
    pub schedules: u64,
    /// Wall time, s.
    pub wall_s: f64,
    /// Schedules per second of wall time.
    pub schedules_per_s: f64,
    /// Real calls.
    pub calls: Calls,
    /// Per crash point: schedules that passed it, crashes and failures injected there.
    pub coverage: BTreeMap<String, Coverage>,
    /// Schedules whose decisions used each fault kind (`crash@`, `tick`, `sqs:receive-lost`, …).
    pub faults: BTreeMap<String, u64>,
    /// Invariants: of the failing schedule for a failure, else over every schedule run.
    pub invariants: Vec<InvariantResult>,
    /// Explored cases run by this job, in order (empty for other kinds).
    pub cases: Vec<Case>,
    /// The failure, if any.
    pub failure: Option<FailureReport>,
    /// SQS behaviours (calibration probe names) that some schedule's outcome depended on,
    /// e.g. `stale-receipt-handle`.
    pub depends_on: Vec<String>,
    /// Caveats for this scenario's verdict: behaviours it depends on where calibration found
    /// the endpoint differs from AWS.
    pub caveats: Vec<String>,
    /// An exploration's abstract coverage signal (`explore/signal.rs`): its elements in all
    /// and after every 100 schedules. Left out of report.json for other kinds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<SignalGrowth>,
    /// The external worker processes it ran ([`crate::sim::wire`]): command, runtime, SDK
    /// retries seen on the wire. Empty (and left out of report.json) for in-process fleets.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub external_workers: Vec<crate::sim::wire::WorkerInfo>,
    /// With `--check-determinism`: schedules run twice and how many gave the same trace byte
    /// for byte. Left out of report.json when not checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub determinism: Option<crate::explore::Determinism>,
    /// Schedules that ran on worker processes kept from the schedule before (roles declared
    /// `reuse = true`); left out of report.json when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reused_schedules: Option<u64>,
    /// Of those, schedules that failed on kept processes and ran otherwise on fresh ones,
    /// whose outcome counted (absent when none did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_differed: Option<u64>,
}

/// The coverage an exploration reached, as distinct elements of the abstract signal.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SignalGrowth {
    /// Distinct elements over every schedule run.
    pub elements: usize,
    /// Distinct elements after 100, 200, … schedules: the coverage growth.
    pub per_100_schedules: Vec<usize>,
}

fn calls(st: &Stats) -> Calls {
    let (pg, sqs, redis) = st.calls_per_schedule();
    Calls {
        pg: st.calls.pg as u64,
        sqs: st.calls.sqs as u64,
        redis: st.calls.redis as u64,
        pg_per_schedule: pg,
        sqs_per_schedule: sqs,
        redis_per_schedule: redis,
        http: (st.calls.net > 0).then_some(st.calls.net as u64),
    }
}

/// Per crash point of each role, keyed `<role> <point>` (`c after_commit`).
fn coverage(st: &Stats) -> BTreeMap<String, Coverage> {
    st.coverage_rows().into_iter().map(|((role, cp), c)| (format!("{role} {cp}"), c)).collect()
}

fn invariants(verdicts: &[Verdict]) -> Vec<InvariantResult> {
    verdicts
        .iter()
        .map(|v| InvariantResult { invariant: v.invariant.to_string(), holds: v.holds, detail: v.detail.clone() })
        .collect()
}

fn all_hold(s: &Scenario) -> Vec<InvariantResult> {
    s.invariants()
        .iter()
        .map(|i| InvariantResult { invariant: i.name(), holds: true, detail: String::new() })
        .collect()
}

/// The commands that reproduce `schedule` of scenario `s` on `system` (and, with a case seed
/// that generates it, the schedule as generated before shrinking: `--seed`, with
/// `--all-faults` when the run had it, since the menu, and so the generated schedule, depends
/// on it). A guided exploration's mutation is made from earlier cases, which `--seed` alone
/// cannot rebuild: without `case_seed`, its schedule before shrinking, `original`, is given as
/// text instead.
pub fn repro_commands(s: &Scenario, system: &str, schedule: &Schedule, case_seed: Option<u64>, original: Option<&Schedule>) -> Vec<String> {
    let scenario = &s.name;
    let sys = if system == "reference" { String::new() } else { format!(" --system {system}") };
    let mut out = vec![format!("crashpoint repro {scenario}{sys} --schedule '{schedule}'")];
    let guided = s.explore.as_ref().is_some_and(|e| e.strategy == crate::scenario::Strategy::Guided);
    match (case_seed, original) {
        (None, Some(o)) if guided && o != schedule => out.push(format!("crashpoint repro {scenario}{sys} --schedule '{o}'")),
        (Some(c), _) => {
            let all = if s.explore.as_ref().is_some_and(|e| e.all_faults) { " --all-faults" } else { "" };
            out.push(format!("crashpoint repro {scenario}{sys}{all} --seed {c}"));
        }
        _ => {}
    }
    out
}

fn failure_of(s: &Scenario, system: &str, o: &ScenarioOutcome, original: &Schedule, case_seed: Option<u64>) -> FailureReport {
    let mut violated: Vec<String> =
        o.verdicts.iter().filter(|v| !v.holds).map(|v| format!("{}: {}", v.invariant, v.detail)).collect();
    violated.extend(o.missing_trace_facts.iter().map(|f| format!("expected trace fact missing: {f:?}")));
    FailureReport {
        schedule: o.schedule.to_string(),
        original: original.to_string(),
        case_seed,
        schedules_until: 1,
        shrink_runs: 0,
        violated,
        divergence: None,
        breaking_step: super::violation::breaking_line(o).map(|l| l.trim().to_string()),
        trace: o.trace.clone(),
        repro: repro_commands(s, system, &o.schedule, case_seed, Some(original)),
        timeline: None,
    }
}

impl ScenarioReport {
    fn base(s: &Scenario, system: &str, kind: Kind, st: &Stats, ok: bool) -> Self {
        ScenarioReport {
            name: s.name.clone(),
            system: system.to_string(),
            kind,
            verdict: Outcome::of(ok),
            expected: Outcome::Pass,
            schedules: st.schedules,
            wall_s: st.wall.as_secs_f64(),
            schedules_per_s: st.per_second(),
            calls: calls(st),
            coverage: coverage(st),
            faults: st.faults.clone(),
            invariants: all_hold(s),
            cases: Vec::new(),
            failure: None,
            depends_on: st.depends_on.iter().cloned().collect(),
            caveats: Vec::new(),
            signal: None,
            external_workers: s.external.iter().map(|e| crate::sim::wire::info(e)).collect(),
            determinism: st.determinism,
            reused_schedules: (st.reused > 0).then_some(st.reused),
            kept_differed: (st.kept_differed.0 > 0).then_some(st.kept_differed.0),
        }
    }

    /// A scripted scenario's one schedule.
    pub fn scripted(s: &Scenario, system: &str, o: &ScenarioOutcome) -> Self {
        let mut st = Stats::default();
        st.record(o);
        st.wall = o.wall;
        let mut r = Self::base(s, system, Kind::Scripted, &st, o.passed());
        r.invariants = invariants(&o.verdicts);
        if !o.passed() {
            r.failure = Some(failure_of(s, system, o, &o.schedule, None));
        }
        r
    }

    /// An exploration: its stats, the cases it ran, and its shrunk failure.
    pub fn explored(s: &Scenario, system: &str, rep: &Report) -> Self {
        let mut r = Self::base(s, system, Kind::Explored, &rep.stats, rep.failure.is_none());
        r.cases = rep.stats.cases.clone();
        r.signal = Some(SignalGrowth { elements: rep.stats.signal.len(), per_100_schedules: rep.stats.signal_growth.clone() });
        if let Some(f) = &rep.failure {
            r.invariants = invariants(&f.minimal.verdicts);
            r.depends_on = f.minimal.history.depends_on().into_iter().collect();
            // The repro lines from the seed that rebuilds the case; the record keeps its seed.
            let mut fr = failure_of(s, system, &f.minimal, &f.original, f.repro_seed());
            fr.case_seed = f.case_seed;
            fr.schedules_until = f.schedules_until;
            fr.shrink_runs = f.shrink_runs as u64;
            fr.divergence = f.divergence.clone();
            if let Some(d) = &f.divergence {
                fr.violated.push(format!("determinism: first divergence at {d}"));
            }
            r.failure = Some(fr);
        }
        r
    }

    /// An exhaustive enumeration.
    pub fn exhaustive(s: &Scenario, system: &str, e: &Enumeration) -> Self {
        let mut r = Self::base(s, system, Kind::Exhaustive, &e.stats, e.failure.is_none());
        if let Some(o) = &e.failure {
            r.invariants = invariants(&o.verdicts);
            r.depends_on = o.history.depends_on().into_iter().collect();
            let mut fr = failure_of(s, system, o, &o.schedule, None);
            fr.schedules_until = e.stats.schedules;
            r.failure = Some(fr);
        }
        r
    }

    /// The slug used in file names: `payout/explore` → `payout-explore` (plus `-<system>`
    /// when `with_system`).
    pub fn slug(&self, with_system: bool) -> String {
        let base = self.name.replace('/', "-");
        if with_system { format!("{base}-{}", self.system) } else { base }
    }
}

impl RunReport {
    /// Records the calibration and derives the run-wide caveats: one per behaviour where the
    /// endpoint differs from AWS or the probe failed. (A scenario's own caveats come from
    /// [`scenario_caveats`].)
    pub fn calibrated(&mut self, cal: crate::services::calibrate::Calibration) {
        use crate::services::calibrate::Verdict;
        for p in &cal.probes {
            match &p.verdict {
                Verdict::Matches => {}
                Verdict::Differs => self.caveats.push(format!(
                    "the SQS endpoint differs from AWS on `{}`: it did \"{}\"; AWS documents: {} ({})",
                    p.behaviour,
                    p.observed,
                    p.behaviour.aws(),
                    p.behaviour.source()
                )),
                Verdict::ProbeFailed(why) => {
                    self.caveats.push(format!("calibration probe `{}` failed ({why}): no evidence either way", p.behaviour))
                }
            }
        }
        self.calibration = Some(cal);
    }
}

/// The caveats of a scenario that depended on `depends_on` (probe names) against `cal`.
pub fn scenario_caveats(depends_on: &[String], cal: &crate::services::calibrate::Calibration) -> Vec<String> {
    use crate::services::calibrate::Behaviour;
    depends_on
        .iter()
        .filter_map(|name| Behaviour::ALL.into_iter().find(|b| b.as_str() == name))
        .filter(|b| cal.deviates(*b))
        .map(|b| {
            format!(
                "this verdict depends on `{b}`, where the endpoint differs from AWS (calibration); \
                 on AWS the outcome may differ: try the nemesis fault that produces AWS's behaviour \
                 (e.g. sqs:stale-delete-noop)"
            )
        })
        .collect()
}

impl RunReport {
    /// Exit code for this report: 2 after a harness error, 0 when every scenario got its
    /// expected verdict, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match (&self.error, self.verdict) {
            (Some(_), _) => crate::error::EXIT_HARNESS,
            (None, Outcome::Pass) => crate::error::EXIT_OK,
            (None, Outcome::Fail) => crate::error::EXIT_VIOLATION,
        }
    }

    /// Records the error that ended the run early; when a signal stopped the run, says so
    /// instead of the service error it caused.
    pub fn ended_by(&mut self, e: &anyhow::Error) {
        self.error = Some(match crate::services::native::process::interrupted() {
            Some(sig) => format!("interrupted by signal {sig} (the services were stopped); the scenarios listed ran before it"),
            None => format!("{e:#}"),
        });
    }

    /// Sets the overall verdict from the scenarios: `pass` when each got its expected verdict.
    pub fn conclude(&mut self) {
        self.verdict = Outcome::of(self.error.is_none() && self.scenarios.iter().all(|s| s.verdict == s.expected));
    }
}
