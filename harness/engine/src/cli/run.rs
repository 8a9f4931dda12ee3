//! `crashpoint run` and `crashpoint repro`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};

use super::print;
use super::progress::Progress;
use crate::error::{EXIT_OK, EXIT_VIOLATION};
use crate::explore::{self, first_divergence, Options, Shard};
use crate::report::model::{Budget, Outcome, RunReport, ScenarioReport, ShardInfo, SCHEMA_VERSION};
use crate::report::{ReportDir, DEFAULT_DIR};
use crate::scenario::{self, run_scenario, Scenario};
use crate::services::{Endpoints, ServiceOptions, Services};
use crate::workload::Registry;

/// An exploration budget: a number of schedules, or a wall-clock duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetArg {
    /// At most this many schedules per exploration scenario (before sharding).
    Schedules(u64),
    /// At most this much wall time per exploration scenario.
    Time(Duration),
}

/// Parses `--budget`: `500` (schedules) or a duration such as `90s`, `5m`.
pub fn parse_budget(s: &str) -> Result<BudgetArg, String> {
    if let Ok(n) = s.parse::<u64>() {
        if n == 0 {
            return Err("`0`: a budget is at least 1 schedule".into());
        }
        return Ok(BudgetArg::Schedules(n));
    }
    humantime::parse_duration(s)
        .map(BudgetArg::Time)
        .map_err(|e| format!("`{s}`: expected a number of schedules (e.g. 500) or a duration (e.g. 90s, 5m): {e}"))
}

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Scenario names, e.g. `windows/crash-after-commit`, or a group such as `windows` (all by default).
    pub scenarios: Vec<String>,
    /// The system under test: `reference` or a mutant (see `crashpoint list`).
    #[arg(long, alias = "mutant", default_value = "reference")]
    pub system: String,
    /// Exploration budget per scenario: schedules (`500`) or wall time (`90s`, `5m`).
    /// Default: 100 schedules.
    #[arg(long, value_parser = parse_budget, conflicts_with_all = ["schedules", "time"])]
    pub budget: Option<BudgetArg>,
    /// Exploration budget in schedules (the same as `--budget N`).
    #[arg(long)]
    pub schedules: Option<u64>,
    /// Exploration budget in wall time (the same as `--budget 60s`).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub time: Option<Duration>,
    /// Run seed, printed at the start (default 0, so that a plain run repeats exactly; pass
    /// e.g. `--seed $RANDOM` to explore other schedules).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Run only shard I of N (`1/4`): explored cases, saved regressions and scripted scenarios
    /// are dealt round-robin, so N jobs together run exactly what one unsharded job runs.
    #[arg(long, default_value = "1/1")]
    pub shard: Shard,
    /// Where `junit.xml`, `report.json`, `summary.md` and the timelines go.
    #[arg(long, default_value = DEFAULT_DIR)]
    pub report_dir: PathBuf,
    /// Run every schedule twice and compare the traces byte for byte.
    #[arg(long)]
    pub check_determinism: bool,
    /// Enumerate every interleaving of the exhaustive scenarios (all of them when no scenario
    /// is named); without it, exhaustive scenarios run only when named.
    #[arg(long)]
    pub exhaustive: bool,
    /// Explored schedules run at once, each in its own slot (thread, turmoil simulation,
    /// schema, queues). Default: two per core. Output and reports do not depend on it.
    #[arg(long, default_value_t = crate::explore::default_jobs())]
    pub jobs: usize,
    /// Put every engine fault on the exploration menus, whatever the scenario files say: the
    /// SQS faults and the PostgreSQL outcome faults ([`Scenario::with_all_faults`]). What
    /// `scripts/soak.sh` runs.
    #[arg(long)]
    pub all_faults: bool,
}

impl RunArgs {
    fn budget(&self) -> Budget {
        match (self.budget, self.schedules, self.time) {
            (Some(BudgetArg::Schedules(n)), _, _) => Budget { schedules: Some(n), seconds: None },
            (Some(BudgetArg::Time(t)), _, _) => Budget { schedules: None, seconds: Some(t.as_secs_f64()) },
            (None, n, t) => Budget {
                schedules: n.or(if t.is_none() { Some(100) } else { None }),
                seconds: t.map(|t| t.as_secs_f64()),
            },
        }
    }
}

/// Arguments of `repro`.
#[derive(Debug, clap::Args)]
pub struct ReproArgs {
    /// The scenario, e.g. `payout/explore`.
    pub scenario: String,
    /// The schedule text to run (as printed by a failing run).
    #[arg(long, conflicts_with = "seed")]
    pub schedule: Option<String>,
    /// A case seed: regenerate that schedule of an exploration scenario.
    #[arg(long)]
    pub seed: Option<u64>,
    /// The system under test.
    #[arg(long, alias = "mutant", default_value = "reference")]
    pub system: String,
    /// Where the reports of this one schedule go (its timeline when it fails); not
    /// `reports/latest/`, so that a repro never replaces the reports of the run it came from.
    #[arg(long, default_value = "reports/repro")]
    pub report_dir: PathBuf,
    /// With `--seed`: regenerate the schedule from the menu of a run that had `--all-faults`.
    #[arg(long)]
    pub all_faults: bool,
}

/// The scenarios named by `wanted` (a name, or a group: every scenario under it), in the order
/// asked; all when `wanted` is empty. Errors: a name that matches none, with the known names.
fn select(all: Vec<Scenario>, wanted: &[String]) -> Result<Vec<Scenario>> {
    if wanted.is_empty() {
        return Ok(all);
    }
    let mut out = Vec::new();
    for w in wanted {
        let matched: Vec<&Scenario> =
            all.iter().filter(|s| &s.name == w || s.name.starts_with(&format!("{w}/"))).collect();
        if matched.is_empty() {
            let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
            bail!("no scenario `{w}`; known: {}", names.join(", "));
        }
        out.extend(matched.into_iter().cloned());
    }
    Ok(out)
}

/// Starts the services, checks that destroying schemas and queues is allowed there, runs `f`
/// and stops them whatever happened. When `f` fails and a service no longer accepts
/// connections, the error says which ([`Endpoints::unreachable`]).
pub fn with_services<T>(
    rt: &tokio::runtime::Runtime,
    opts: &ServiceOptions,
    f: impl FnOnce(&Endpoints) -> Result<T>,
) -> Result<T> {
    let services = rt.block_on(Services::start(opts))?;
    if let Err(refused) = services.check_destructive("creating and dropping schemas and queues") {
        rt.block_on(services.stop());
        return Err(refused);
    }
    let result = f(&services.endpoints)
        .map_err(|e| match services.endpoints.unreachable() {
            down if down.is_empty() => e,
            down => e.context(format!("{} stopped accepting connections during the run", down.join(" and "))),
        });
    crate::namespace::pool::release();
    rt.block_on(services.stop());
    result
}

/// Calibrates the SQS endpoint and prints the table; a mismatch or a failed probe is said
/// plainly. Errors: the endpoint is unreachable.
fn calibrate(rt: &tokio::runtime::Runtime, endpoints: &Endpoints) -> Result<crate::services::calibrate::Calibration> {
    let url = crate::services::redact::url(&endpoints.sqs_endpoint_url);
    let client = crate::services::clients::sqs_client(&endpoints.sqs_endpoint_url);
    let cal = rt.block_on(crate::services::calibrate::calibrate(&client, &url))?;
    print!("{}", cal.table());
    let off: Vec<String> = cal.probes.iter().filter(|p| cal.deviates(p.behaviour)).map(|p| p.behaviour.to_string()).collect();
    if !off.is_empty() {
        println!(
            "NOTE: this SQS endpoint does not behave like AWS on {}; verdicts that depend on it carry a caveat \
             (skip this check with --no-calibrate)",
            off.join(", ")
        );
    }
    println!();
    Ok(cal)
}

/// A new report for `command` with this run's seed, budget and shard.
pub fn new_report(command: &str, seed: u64, budget: Budget, shard: Shard) -> RunReport {
    RunReport {
        schema: SCHEMA_VERSION,
        crashpoint: env!("CARGO_PKG_VERSION"),
        command: command.to_string(),
        seed,
        budget,
        shard: ShardInfo { index: shard.index, count: shard.count },
        started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        wall_s: 0.0,
        verdict: Outcome::Pass,
        scenarios: Vec::new(),
        calibration: None,
        caveats: Vec::new(),
        error: None,
    }
}

/// Writes the failing schedule's timeline (when `r` failed) and records its file name.
pub fn add_timeline(
    dir: &ReportDir,
    r: &mut ScenarioReport,
    o: Option<&scenario::ScenarioOutcome>,
    with_system: bool,
) -> Result<()> {
    let (title, slug) = (format!("{} (system {})", r.name, r.system), r.slug(with_system));
    if let (Some(f), Some(o)) = (r.failure.as_mut(), o) {
        f.timeline = Some(dir.timeline(&slug, &title, o, &f.repro)?);
    }
    Ok(())
}

struct Job<'a> {
    endpoints: &'a Endpoints,
    system: String,
    args: &'a RunArgs,
    dir: ReportDir,
    failures: usize,
}

impl Job<'_> {
    fn scripted(&mut self, s: &Scenario) -> Result<ScenarioReport> {
        println!("== {}: {}", s.name, s.description);
        let system = scenario::system_of(s, &self.system)?;
        let o = run_scenario(self.endpoints, system.clone(), s, None)?;
        print::outcome(s, &o);
        let mut r = ScenarioReport::scripted(s, system.name(), &o);
        if self.args.check_determinism {
            let again = run_scenario(self.endpoints, system.clone(), s, None)?;
            let divergence = first_divergence(&o.trace, &again.trace);
            crate::explore::Determinism::count(&mut r.determinism, divergence.is_none());
            match divergence {
                Some(d) => {
                    println!("FAIL {}: not deterministic; first divergence at {d}\n", s.name);
                    r.verdict = Outcome::Fail;
                    r.invariants.push(crate::report::model::InvariantResult {
                        invariant: "determinism".into(),
                        holds: false,
                        detail: format!("first divergence at {d}"),
                    });
                }
                None => println!("determinism: a second run gave the same trace, byte for byte\n"),
            }
        }
        add_timeline(&self.dir, &mut r, Some(&o), false)?;
        Ok(r)
    }

    fn explored(&mut self, s: &Scenario) -> Result<ScenarioReport> {
        println!("== {}: {}", s.name, s.description);
        let system = scenario::system_of(s, &self.system)?;
        let budget = self.args.budget();
        let opts = Options {
            schedules: budget.schedules,
            time: budget.seconds.map(Duration::from_secs_f64),
            seed: self.args.seed,
            check_determinism: self.args.check_determinism,
            shard: self.args.shard,
            jobs: self.args.jobs,
        };
        let total = budget.schedules.map(|n| (0..n).filter(|k| opts.shard.owns(*k)).count() as u64);
        let started = Instant::now();
        let mut progress = Progress::start(&s.name, total, self.failures);
        let report = explore::explore(self.endpoints, system.clone(), s, &opts, |st| progress.update(st, started));
        progress.finish();
        let report = report?;
        print::exploration(s, system.name(), &report);
        let mut r = ScenarioReport::explored(s, system.name(), &report);
        add_timeline(&self.dir, &mut r, report.failure.as_ref().map(|f| &f.minimal), false)?;
        Ok(r)
    }

    fn enumerated(&mut self, s: &Scenario) -> Result<ScenarioReport> {
        println!("== {}: {}", s.name, s.description);
        let system = scenario::system_of(s, &self.system)?;
        let started = Instant::now();
        let mut progress = Progress::start(&s.name, None, self.failures);
        let e = explore::exhaustive::enumerate(self.endpoints, system.clone(), s, |st| progress.update(st, started));
        progress.finish();
        let e = e?;
        print::enumeration(s, system.name(), &e);
        let mut r = ScenarioReport::exhaustive(s, system.name(), &e);
        add_timeline(&self.dir, &mut r, e.failure.as_ref(), false)?;
        Ok(r)
    }
}

/// Runs the chosen scenarios against real services: scripted ones once, exploration ones
/// within the budget, exhaustive ones (only with `--exhaustive` or when named) completely,
/// and writes the reports. Exit code 0 when all pass, 1 when an invariant is violated (or a
/// trace is not deterministic); errors (exit 2) for services, malformed scenarios, or a report
/// directory that cannot be written.
pub fn run(rt: &tokio::runtime::Runtime, opts: &ServiceOptions, args: &RunArgs, registry: &Registry) -> Result<i32> {
    let mut chosen = select(scenario::discover(&scenario::scenarios_dir(), registry)?, &args.scenarios)?;
    if args.all_faults {
        chosen = chosen.into_iter().map(Scenario::with_all_faults).collect();
    }
    let system = args.system.clone();
    let known = |s: &Scenario| s.workload.systems().iter().any(|i| i.name == system);
    if args.scenarios.is_empty() {
        // By default: exhaustive scenarios only with --exhaustive; a mutant gets the
        // exploration scenarios of the workloads that have it (scripts name the reference's
        // calls, which a mutant may not make).
        chosen.retain(|s| s.exhaustive.is_some() == args.exhaustive);
        if system != "reference" {
            if !chosen.iter().any(known) {
                bail!("unknown system `{system}`; see `crashpoint list` for each workload's systems");
            }
            chosen.retain(|s| known(s) && (args.exhaustive || s.explore.is_some()));
        }
    } else if let Some(s) = chosen.iter().find(|s| !known(s)) {
        scenario::system_of(s, &system)?;
    }
    let chosen = explore::for_shard(chosen, args.shard);
    let dir = ReportDir::create(&args.report_dir)?;
    let _hold = crate::services::native::process::ReportHold::take();
    let seed = args.seed;
    let started = Instant::now();
    let span = tracing::info_span!("run", seed, system = %system, shard = %args.shard);
    let _enter = span.enter();
    println!("seed: {seed} (repeat this run with --seed {seed}); system: {system}; shard {}\n", args.shard);
    let mut report = new_report("run", seed, args.budget(), args.shard);
    let mut calibration = None;
    let result = with_services(rt, opts, |endpoints| {
        if !opts.no_calibrate {
            calibration = Some(calibrate(rt, endpoints)?);
        }
        let mut job = Job { endpoints, system: system.clone(), args, dir: dir.clone(), failures: 0 };
        for s in &chosen {
            let _s = tracing::info_span!("scenario", name = %s.name).entered();
            let mut r = if s.exhaustive.is_some() {
                job.enumerated(s)?
            } else if s.explore.is_some() {
                job.explored(s)?
            } else {
                job.scripted(s)?
            };
            if r.verdict == Outcome::Fail {
                job.failures += 1;
            }
            if let Some(cal) = &calibration {
                r.caveats = crate::report::model::scenario_caveats(&r.depends_on, cal);
                for c in &r.caveats {
                    println!("caveat ({}): {c}\n", r.name);
                }
            }
            report.scenarios.push(r);
        }
        Ok(())
    });
    report.wall_s = started.elapsed().as_secs_f64();
    if let Some(cal) = calibration {
        report.calibrated(cal);
    }
    if let Err(e) = &result {
        report.ended_by(e);
    }
    report.conclude();
    dir.finish(&report)?;
    result?;
    let failed = report.scenarios.iter().filter(|s| s.verdict == Outcome::Fail).count();
    println!("{} passed, {failed} failed", report.scenarios.len() - failed);
    println!("reports: {}", dir.path().display());
    Ok(report.exit_code())
}

/// Runs one schedule of a scenario (given as text, or regenerated from a case seed), prints
/// its trace and verdict, and writes its reports. Exit 1 when it violates an invariant.
pub fn repro(rt: &tokio::runtime::Runtime, opts: &ServiceOptions, args: &ReproArgs, registry: &Registry) -> Result<i32> {
    let all = scenario::discover(&scenario::scenarios_dir(), registry)?;
    let mut s = select(all, std::slice::from_ref(&args.scenario))?
        .into_iter()
        .find(|s| s.name == args.scenario)
        .ok_or_else(|| anyhow!("`{}` is a group; name one scenario", args.scenario))?;
    if args.all_faults {
        s = s.with_all_faults();
    }
    // `Err(seed)`: the schedule of `--seed` is generated once the services run (the menu may
    // hold the calls a run with no decision makes, `[explore] call_boundaries`).
    let schedule: std::result::Result<crate::schedule::Schedule, u64> = match (&args.schedule, args.seed) {
        (Some(text), _) => {
            let vocabulary = crate::schedule::Vocabulary::of(s.workload.as_ref());
            let schedule = crate::schedule::parse(text, &vocabulary).map_err(|e| anyhow!("--schedule: {e}"))?;
            let unknown = schedule.unknown_names(&s.workers, &s.event_names);
            if !unknown.is_empty() {
                bail!("--schedule names what {} does not have: {}", s.name, unknown.join("; "));
            }
            Ok(schedule)
        }
        (None, Some(seed)) if s.explore.is_some() => Err(seed),
        (None, Some(_)) => bail!("--seed regenerates schedules of exploration scenarios; {} is scripted", s.name),
        (None, None) => Ok(s.schedule.clone()),
    };
    if schedule.as_ref() != Ok(&s.schedule) {
        // The file's `expect_trace` describes its own schedule; another one is judged by the
        // invariants alone.
        s.expect_trace.clear();
    }
    let system = scenario::system_of(&s, &args.system)?;
    let dir = ReportDir::create(&args.report_dir)?;
    let started = Instant::now();
    with_services(rt, opts, |endpoints| {
        let schedule = match schedule {
            Ok(schedule) => schedule,
            Err(seed) => explore::generate(&s, &explore::call_boundaries(endpoints, system.clone(), &s)?, seed)?,
        };
        println!("== {}: {}", s.name, s.description);
        let o = run_scenario(endpoints, system.clone(), &s, Some(&schedule))?;
        print::outcome(&s, &o);
        let mut report = new_report("repro", args.seed.unwrap_or(0), Budget::default(), Shard::default());
        let mut r = ScenarioReport::scripted(&s, system.name(), &o);
        r.kind = crate::report::model::Kind::Repro;
        add_timeline(&dir, &mut r, Some(&o), false)?;
        report.scenarios.push(r);
        report.wall_s = started.elapsed().as_secs_f64();
        report.conclude();
        dir.finish(&report)?;
        println!("reports: {}", dir.path().display());
        Ok(if o.passed() { EXIT_OK } else { EXIT_VIOLATION })
    })
}

