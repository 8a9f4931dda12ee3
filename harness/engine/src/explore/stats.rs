//! Counters of an exploration: schedules, calls, crash-point coverage.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::scenario::ScenarioOutcome;
use crate::record::history::{Entry, Fact, FaultEvent};
use crate::spec::CrashPoint;
use crate::record::history::CallCounts;

/// How one crash point was exercised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Coverage {
    /// Schedules in which a worker passed through it.
    pub passed: u64,
    /// Crashes injected there.
    pub crashed: u64,
    /// Failures injected there.
    pub failed: u64,
}

/// One explored case: its index in the (unsharded) run and its case seed (`repro --seed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Case {
    /// Index in the unsharded run, 0-based.
    pub index: u64,
    /// Case seed.
    pub case_seed: u64,
    /// The generated schedule's id: a UUID v5 of its text ([`schedule_id`]), equal for equal
    /// schedules, so that runs over many seeds can count the distinct schedules they tried.
    pub schedule: uuid::Uuid,
}

/// The id of a schedule: a name-based UUID (v5, RFC 9562) of its text in a fixed namespace, so
/// the same schedule has the same id in every run and on every machine.
pub fn schedule_id(schedule: &crate::schedule::Schedule) -> uuid::Uuid {
    const NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x6372_6173_6870_6f69_6e74_2d73_6368_6564);
    uuid::Uuid::new_v5(&NAMESPACE, schedule.to_string().as_bytes())
}

/// Totals over the schedules run.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Schedules run (shrinking and determinism reruns excluded).
    pub schedules: u64,
    /// Real calls, summed over those schedules.
    pub calls: CallCounts,
    /// Every SQS call by operation name, the harness's own included, summed over those
    /// schedules.
    pub sqs_calls: BTreeMap<String, u64>,
    /// Simulation steps, summed over those schedules.
    pub steps: u64,
    /// Per crash point of each role: (role prefix, point).
    pub coverage: BTreeMap<(&'static str, CrashPoint), Coverage>,
    /// Wall time of the exploration.
    pub wall: Duration,
    /// Generated cases run, in order (regressions and scripted schedules are not cases).
    pub cases: Vec<Case>,
    /// SQS behaviours (calibration probe names) that some schedule's outcome depended on.
    pub depends_on: std::collections::BTreeSet<String>,
    /// Each schedule's wall time by phase, in order.
    pub phases: Vec<crate::scenario::Phases>,
    /// Schedules that used each fault kind (see [`crate::schedule::Decision::fault_kind`]).
    pub faults: BTreeMap<String, u64>,
    /// The workload's crash points by role, in role order (the rows of the coverage table):
    /// (role prefix, point).
    pub points: Vec<(&'static str, CrashPoint)>,
    /// The abstract coverage signal reached so far: the distinct elements of every
    /// schedule's [`super::signal::signal`].
    pub signal: std::collections::BTreeSet<String>,
    /// The size of [`Stats::signal`] after every [`SIGNAL_EVERY`] schedules, in order.
    pub signal_growth: Vec<usize>,
    /// The workload's roles, for the signal's role names.
    pub roles: Vec<crate::spec::RoleSpec>,
    /// With `--check-determinism`: schedules run a second time, and how many of those gave the
    /// same trace byte for byte (the rest is a failure). `None` when not checked.
    pub determinism: Option<Determinism>,
    /// Schedules that ran on worker processes kept from the schedule before instead of
    /// started (roles declared `reuse = true`, [`crate::sim::wire::keep`]).
    pub reused: u64,
    /// Of those, the ones that failed on kept processes and ran otherwise on fresh ones (two
    /// fresh runs agreeing, whose outcome counts), with the first such schedule and how the
    /// runs differed.
    pub kept_differed: (u64, Option<String>),
}

/// Schedules run twice to check determinism ([`Stats::determinism`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Determinism {
    /// Schedules run a second time.
    pub ran_twice: u64,
    /// Of those, the ones whose second trace was the first's, byte for byte.
    pub identical: u64,
}

impl Determinism {
    /// Counts one schedule run twice; `same` when its traces were identical.
    pub fn count(d: &mut Option<Determinism>, same: bool) {
        let d = d.get_or_insert_with(Determinism::default);
        d.ran_twice += 1;
        d.identical += same as u64;
    }

    /// The summary line: `determinism: 100 schedules ran twice, every trace the same byte for
    /// byte` (or how many differed).
    pub fn line(&self) -> String {
        match self.ran_twice - self.identical {
            0 => format!("determinism: {} schedule(s) ran twice, every trace the same byte for byte", self.ran_twice),
            n => format!("determinism: {} schedule(s) ran twice, {n} gave another trace", self.ran_twice),
        }
    }
}

/// Schedules between two samples of [`Stats::signal_growth`].
pub const SIGNAL_EVERY: u64 = 100;

/// Key in [`Stats::faults`]: schedules in which a dispatch attempt sent nothing (suppressed by a
/// lock, or the producer crashed before SendMessage).
pub const UNSENT_DISPATCH: &str = "dispatch sent nothing";
/// Key in [`Stats::faults`]: schedules in which a FIFO queue dropped a send as a duplicate.
pub const FIFO_DROPPED: &str = "FIFO dedup dropped a send";
/// The key of [`Stats::faults`] counting schedules in which a message moved to a dead-letter
/// queue ([`FaultEvent::DeadLettered`]).
pub const DEAD_LETTERED: &str = "moved to a dead-letter queue";
/// Key in [`Stats::faults`]: schedules whose drain dispatched a never-sent event again.
pub const UPSTREAM_RETRY: &str = "upstream retry (drain)";

/// Whether some dispatch attempt of `history` ended without its event being sent: the next
/// attempt of the same producer began, or the history ended, before a `Sent` of its identity.
fn dispatch_sent_nothing(history: &crate::record::history::History) -> bool {
    let mut open: std::collections::BTreeMap<&str, (uuid::Uuid, bool)> = Default::default();
    for s in history.steps() {
        for f in &s.facts {
            match f {
                Fact::Dispatched { identity, .. }
                    if open.insert(&s.worker, (*identity, false)).is_some_and(|(_, sent)| !sent) => {
                        return true;
                    }
                Fact::Sent { identity, .. } => {
                    if let Some((id, sent)) = open.get_mut(s.worker.as_str()) {
                        *sent |= id == identity;
                    }
                }
                _ => {}
            }
        }
    }
    open.values().any(|(_, sent)| !sent)
}

impl Stats {
    /// The summary line of [`Stats::reused`], `None` when no schedule reused a process:
    /// `kept worker processes: 98 of 100 schedules ran on processes of the schedule before
    /// (reuse = true); every failure is replayed on fresh ones before it is reported`.
    pub fn reused_line(&self) -> Option<String> {
        (self.reused > 0).then(|| {
            let differed = match &self.kept_differed {
                (0, _) => String::new(),
                (n, first) => format!(
                    "; {n} ran otherwise there than on fresh ones, whose outcome counts, and every schedule after it started fresh \
                     processes (a kept process carries its own state, or a timer of its client's that a schedule's end started, \
                     such as a reconnect backoff; the first: {})",
                    first.as_deref().unwrap_or("?")
                ),
            };
            format!(
                "kept worker processes: {} of {} schedules ran on processes of the schedule before (reuse = true); \
                 a failure is reported only as fresh processes replay it{differed}",
                self.reused, self.schedules
            )
        })
    }

    /// Counts a schedule whose run on kept processes and replay on fresh ones differed
    /// (`how`: the schedule and where).
    pub fn kept_differed(&mut self, how: String) {
        self.kept_differed.0 += 1;
        self.kept_differed.1.get_or_insert(how);
    }

    /// Empty counters for a scenario of `workload`.
    pub fn new(workload: &dyn crate::workload::Workload) -> Stats {
        let roles = workload.roles();
        let points = roles.iter().flat_map(|r| r.points.iter().map(move |p| (r.prefix, *p))).collect();
        Stats { points, roles, ..Stats::default() }
    }

    /// Adds one schedule's outcome.
    pub fn record(&mut self, o: &ScenarioOutcome) {
        let signal = super::signal::signal(&o.history, &self.roles);
        self.record_with(o, signal);
    }

    /// Adds one schedule's outcome whose abstract coverage signal was computed already (a
    /// slot computes it beside the run, for a guided exploration's corpus too).
    pub(super) fn record_with(&mut self, o: &ScenarioOutcome, signal: std::collections::BTreeSet<String>) {
        self.schedules += 1;
        self.reused += u64::from(!o.reused.is_empty());
        self.signal.extend(signal);
        if self.schedules % SIGNAL_EVERY == 0 {
            self.signal_growth.push(self.signal.len());
        }
        self.calls.pg += o.calls.pg;
        self.calls.sqs += o.calls.sqs;
        self.calls.redis += o.calls.redis;
        self.calls.net += o.calls.net;
        self.steps += o.steps;
        for (op, n) in &o.sqs_calls {
            *self.sqs_calls.entry(op.clone()).or_default() += n;
        }
        self.depends_on.extend(o.history.depends_on());
        self.phases.push(o.phases);
        let mut kinds: Vec<String> = o.schedule.decisions.iter().filter_map(|d| d.fault_kind()).collect();
        kinds.sort();
        kinds.dedup();
        for k in kinds {
            *self.faults.entry(k).or_default() += 1;
        }
        if dispatch_sent_nothing(&o.history) {
            *self.faults.entry(UNSENT_DISPATCH.into()).or_default() += 1;
        }
        if o.history.facts().any(|f| matches!(f, Fact::Suppressed { .. })) {
            *self.faults.entry(FIFO_DROPPED.into()).or_default() += 1;
        }
        let happened = |f: fn(&FaultEvent) -> bool| o.history.entries.iter().any(|e| matches!(e, Entry::Fault { fault, .. } if f(fault)));
        if happened(|f| matches!(f, FaultEvent::UpstreamRetry { .. })) {
            *self.faults.entry(UPSTREAM_RETRY.into()).or_default() += 1;
        }
        if happened(|f| matches!(f, FaultEvent::DeadLettered { .. })) {
            *self.faults.entry(DEAD_LETTERED.into()).or_default() += 1;
        }
        let roles = &self.roles;
        let role = |w: &str| crate::spec::role_of(roles, w).map(|r| r.prefix).unwrap_or("?");
        let mut passed: Vec<(&'static str, CrashPoint)> = o.passed.iter().map(|(w, cp)| (role(w), *cp)).collect();
        passed.sort();
        passed.dedup();
        for k in passed {
            self.coverage.entry(k).or_default().passed += 1;
        }
        for e in &o.history.entries {
            match e {
                Entry::Crash { worker, at: Some(cp), op: None, .. } => self.coverage.entry((role(worker), *cp)).or_default().crashed += 1,
                Entry::Step(s) => {
                    use crate::record::history::Outcome;
                    if let Outcome::Injected { at } | Outcome::ServiceErrorInjected { at } = s.outcome {
                        self.coverage.entry((role(&s.worker), at)).or_default().failed += 1;
                    }
                }
                _ => {}
            }
        }
    }

    /// Schedules per second of wall time.
    pub fn per_second(&self) -> f64 {
        self.schedules as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// The rows of the coverage table: each role's declared crash points in role order, then
    /// the other points a schedule crashed or failed a role at (the boundaries after calls).
    pub fn coverage_rows(&self) -> Vec<((&'static str, CrashPoint), Coverage)> {
        let mut rows: Vec<((&'static str, CrashPoint), Coverage)> =
            self.points.iter().map(|k| (*k, self.coverage.get(k).copied().unwrap_or_default())).collect();
        rows.extend(self.coverage.iter().filter(|(k, _)| !self.points.contains(k)).map(|(k, c)| (*k, *c)));
        rows
    }

    /// The coverage table: one row per crash point of each role (`c after_commit`), a point
    /// never reached or never crashed flagged.
    pub fn coverage_table(&self) -> String {
        let rows = self.coverage_rows();
        let width = rows.iter().map(|((role, cp), _)| role.len() + 1 + cp.len()).max().unwrap_or(0).max(28);
        let mut out = format!("{:<width$} {:>10} {:>8} {:>7}\n", "role crash point", "schedules", "crashed", "failed");
        for ((role, cp), c) in rows {
            let declared = self.points.contains(&(role, cp));
            let flag = match (c.passed, c.crashed) {
                (0, _) if declared => "  ← never reached",
                (_, 0) if declared => "  ← never crashed",
                _ => "",
            };
            out.push_str(&format!("{:<width$} {:>10} {:>8} {:>7}{flag}\n", format!("{role} {cp}"), c.passed, c.crashed, c.failed));
        }
        if !self.faults.is_empty() {
            let used: Vec<String> = self.faults.iter().map(|(k, n)| format!("{k} {n}")).collect();
            out.push_str(&format!("schedules using each fault: {}\n", used.join(", ")));
        }
        if let Some(line) = self.signal_line() {
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    /// The coverage growth line: the abstract signal's size after every hundred schedules and
    /// in all, or `None` before the first schedule.
    pub fn signal_line(&self) -> Option<String> {
        if self.schedules == 0 {
            return None;
        }
        let steps: Vec<String> = self
            .signal_growth
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{n} after {}", (i as u64 + 1) * SIGNAL_EVERY))
            .collect();
        let growth = if steps.is_empty() { String::new() } else { format!(" ({})", steps.join(", ")) };
        Some(format!("coverage: {} signal elements in {} schedules{growth}", self.signal.len(), self.schedules))
    }

    /// Mean HTTP requests to the workload's providers per schedule (simulated network).
    pub fn net_per_schedule(&self) -> f64 {
        self.calls.net as f64 / self.schedules.max(1) as f64
    }

    /// Mean calls per schedule, `pg/sqs/redis`.
    pub fn calls_per_schedule(&self) -> (f64, f64, f64) {
        let n = self.schedules.max(1) as f64;
        (self.calls.pg as f64 / n, self.calls.sqs as f64 / n, self.calls.redis as f64 / n)
    }
}
