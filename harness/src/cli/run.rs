//! `crashpoint run` and `crashpoint repro`.

use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};

use crate::error::{EXIT_OK, EXIT_VIOLATION};
use crate::explore::{self, first_divergence, Options, Report};
use crate::scenario::{self, run_scenario, Scenario, ScenarioOutcome};
use crate::services::{Endpoints, ServiceOptions, Services};
use crate::sut::System;

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Scenario names, e.g. `seed/crash-after-commit`, or a group such as `seed` (all by default).
    pub scenarios: Vec<String>,
    /// The system under test: `reference` or a mutant (see `crashpoint list`).
    #[arg(long, alias = "mutant", default_value = "reference")]
    pub system: String,
    /// Exploration budget in schedules (default 100 when --time is not given either).
    #[arg(long)]
    pub schedules: Option<u64>,
    /// Exploration budget in wall time, e.g. `60s` or `5m`.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub time: Option<Duration>,
    /// Run seed, printed at the start (default 0, so that a plain run repeats exactly; pass
    /// e.g. `--seed $RANDOM` to explore other schedules).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Run every schedule twice and compare the traces byte for byte.
    #[arg(long)]
    pub check_determinism: bool,
    /// Enumerate every interleaving of the exhaustive scenarios (all of them when no scenario
    /// is named); without it, exhaustive scenarios run only when named.
    #[arg(long)]
    pub exhaustive: bool,
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
}

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

/// Prints one schedule's result: schedule, trace, invariants, verdict.
pub fn print_outcome(s: &Scenario, o: &ScenarioOutcome) {
    println!("schedule: {}", o.schedule);
    println!("trace:");
    for line in o.trace.lines() {
        println!("  {line}");
    }
    println!("invariants:");
    for v in &o.verdicts {
        let mark = if v.holds { "ok  " } else { "FAIL" };
        if v.detail.is_empty() {
            println!("  {mark} {}", v.invariant);
        } else {
            println!("  {mark} {}: {}", v.invariant, v.detail);
        }
    }
    for f in &o.missing_trace_facts {
        println!("  FAIL expected trace fact missing: {f:?}");
    }
    println!("calls: {} pg, {} sqs, {} redis", o.calls.pg, o.calls.sqs, o.calls.redis);
    println!("{} {}\n", if o.passed() { "PASS" } else { "FAIL" }, s.name);
}

fn with_services<T>(
    rt: &tokio::runtime::Runtime,
    opts: &ServiceOptions,
    f: impl FnOnce(&Endpoints) -> Result<T>,
) -> Result<T> {
    let services = rt.block_on(Services::start(opts))?;
    let result = services
        .check_destructive("creating and dropping schemas and queues")
        .and_then(|_| f(&services.endpoints));
    rt.block_on(services.stop());
    result
}

fn scripted(endpoints: &Endpoints, system: &Rc<dyn System>, s: &Scenario, args: &RunArgs) -> Result<bool> {
    println!("== {}: {}", s.name, s.description);
    let o = run_scenario(endpoints, system.clone(), s, None)?;
    print_outcome(s, &o);
    if args.check_determinism {
        let again = run_scenario(endpoints, system.clone(), s, None)?;
        if let Some(d) = first_divergence(&o.trace, &again.trace) {
            println!("FAIL {}: not deterministic; first divergence at {d}\n", s.name);
            return Ok(false);
        }
        println!("determinism: a second run gave the same trace, byte for byte\n");
    }
    Ok(o.passed())
}

fn explored(endpoints: &Endpoints, system: &Rc<dyn System>, s: &Scenario, args: &RunArgs, seed: u64) -> Result<bool> {
    println!("== {}: {}", s.name, s.description);
    let opts = Options {
        schedules: args.schedules.or(if args.time.is_none() { Some(100) } else { None }),
        time: args.time,
        seed,
        check_determinism: args.check_determinism,
    };
    let mut last = Instant::now();
    let report = explore::explore(endpoints, system.clone(), s, &opts, |st| {
        if last.elapsed() >= Duration::from_secs(5) {
            last = Instant::now();
            eprintln!("  … {} schedules", st.schedules);
        }
    })?;
    print_report(s, system.name(), &report);
    Ok(report.failure.is_none())
}

/// Prints an exploration's summary, coverage and, for a failure, the minimal schedule, its
/// trace and the commands that reproduce it.
pub fn print_report(s: &Scenario, system: &str, r: &Report) {
    let st = &r.stats;
    let (pg, sqs, redis) = st.calls_per_schedule();
    println!(
        "{} schedules in {:.1} s: {:.1} schedules/s; calls per schedule: {pg:.1} pg, {sqs:.1} sqs, {redis:.1} redis",
        st.schedules,
        st.wall.as_secs_f64(),
        st.per_second()
    );
    println!("crash-point coverage:");
    for line in st.coverage_table().lines() {
        println!("  {line}");
    }
    let Some(f) = &r.failure else {
        println!("PASS {} ({system})\n", s.name);
        return;
    };
    if let Some(d) = &f.divergence {
        println!("FAIL {} ({system}): not deterministic; first divergence at {d}", s.name);
    }
    let broken: Vec<String> = f
        .minimal
        .verdicts
        .iter()
        .filter(|v| !v.holds)
        .map(|v| format!("{}: {}", v.invariant, v.detail))
        .collect();
    if !broken.is_empty() {
        println!("FAIL {} ({system}): {}", s.name, broken.join("; "));
    }
    println!(
        "found at schedule {}{}; shrunk from {} to {} decisions in {} runs",
        f.schedules_until,
        f.case_seed.map(|c| format!(" (case seed {c})")).unwrap_or_else(|| " (a saved regression)".into()),
        f.original.decisions.len(),
        f.minimal.schedule.decisions.len(),
        f.shrink_runs
    );
    println!("minimal schedule: {}", f.minimal.schedule);
    println!("trace:");
    for line in f.minimal.trace.lines() {
        println!("  {line}");
    }
    let sys = if system == "reference" { String::new() } else { format!(" --system {system}") };
    println!("reproduce: crashpoint repro {}{sys} --schedule '{}'", s.name, f.minimal.schedule);
    if let Some(c) = f.case_seed {
        println!("           crashpoint repro {}{sys} --seed {c}    (the schedule before shrinking)", s.name);
    }
    println!();
}

fn enumerated(endpoints: &Endpoints, system: &Rc<dyn System>, s: &Scenario) -> Result<bool> {
    println!("== {}: {}", s.name, s.description);
    let mut last = Instant::now();
    let e = explore::exhaustive::enumerate(endpoints, system.clone(), s, |st| {
        if last.elapsed() >= Duration::from_secs(5) {
            last = Instant::now();
            eprintln!("  … {} interleavings", st.schedules);
        }
    })?;
    let st = &e.stats;
    let (pg, sqs, redis) = st.calls_per_schedule();
    println!(
        "exhaustive: {} interleavings ({} with a crash) in {:.1} s: {:.1} schedules/s; calls per schedule: {pg:.1} pg, {sqs:.1} sqs, {redis:.1} redis",
        st.schedules,
        e.with_crash,
        st.wall.as_secs_f64(),
        st.per_second()
    );
    println!("crash-point coverage:");
    for line in st.coverage_table().lines() {
        println!("  {line}");
    }
    let Some(f) = &e.failure else {
        println!("PASS {} ({}): every interleaving holds every invariant\n", s.name, system.name());
        return Ok(true);
    };
    print_outcome(s, f);
    let sys = if system.name() == "reference" { String::new() } else { format!(" --system {}", system.name()) };
    println!("reproduce: crashpoint repro {}{sys} --schedule '{}'\n", s.name, f.schedule);
    Ok(false)
}


/// Runs the chosen scenarios against real services: scripted ones once, exploration ones
/// within the budget, exhaustive ones (only with `--exhaustive` or when named) completely. Exit code 0 when all pass, 1 when an invariant is violated (or a trace
/// is not deterministic); errors (exit 2) for services or malformed scenarios.
pub fn run(rt: &tokio::runtime::Runtime, opts: &ServiceOptions, args: &RunArgs) -> Result<i32> {
    let mut chosen = select(scenario::discover(&scenario::scenarios_dir())?, &args.scenarios)?;
    let system = crate::sut::by_name(&args.system)?;
    if args.scenarios.is_empty() {
        // By default: exhaustive scenarios only with --exhaustive; a mutant gets the
        // exploration scenarios (scripts name the reference's calls, which a mutant may not make).
        chosen.retain(|s| s.exhaustive.is_some() == args.exhaustive);
        if system.name() != "reference" && !args.exhaustive {
            chosen.retain(|s| s.explore.is_some());
        }
    }
    let seed = args.seed;
    println!("seed: {seed} (repeat this run with --seed {seed}); system: {}\n", system.name());
    with_services(rt, opts, |endpoints| {
        let mut failed = Vec::new();
        for s in &chosen {
            let ok = if s.exhaustive.is_some() {
                enumerated(endpoints, &system, s)?
            } else if s.explore.is_some() {
                explored(endpoints, &system, s, args, seed)?
            } else {
                scripted(endpoints, &system, s, args)?
            };
            if !ok {
                failed.push(s.name.clone());
            }
        }
        let passed = chosen.len() - failed.len();
        println!("{passed} passed, {} failed", failed.len());
        Ok(if failed.is_empty() { EXIT_OK } else { EXIT_VIOLATION })
    })
}

/// Runs one schedule of a scenario (given as text, or regenerated from a case seed) and prints
/// its trace and verdict. Exit 1 when it violates an invariant.
pub fn repro(rt: &tokio::runtime::Runtime, opts: &ServiceOptions, args: &ReproArgs) -> Result<i32> {
    let all = scenario::discover(&scenario::scenarios_dir())?;
    let s = select(all, std::slice::from_ref(&args.scenario))?
        .into_iter()
        .find(|s| s.name == args.scenario)
        .ok_or_else(|| anyhow!("`{}` is a group; name one scenario", args.scenario))?;
    let schedule = match (&args.schedule, args.seed) {
        (Some(text), _) => crate::schedule::parse(text).map_err(|e| anyhow!("--schedule: {e}"))?,
        (None, Some(seed)) if s.explore.is_some() => explore::generate(&s, seed)?,
        (None, Some(_)) => bail!("--seed regenerates schedules of exploration scenarios; {} is scripted", s.name),
        (None, None) => s.schedule.clone(),
    };
    let system = crate::sut::by_name(&args.system)?;
    with_services(rt, opts, |endpoints| {
        println!("== {}: {}", s.name, s.description);
        let o = run_scenario(endpoints, system.clone(), &s, Some(&schedule))?;
        print_outcome(&s, &o);
        Ok(if o.passed() { EXIT_OK } else { EXIT_VIOLATION })
    })
}
