//! `crashpoint run`.

use anyhow::{bail, Result};

use crate::error::{EXIT_OK, EXIT_VIOLATION};
use crate::scenario::{self, run_scenario, Scenario, ScenarioOutcome};
use crate::services::{ServiceOptions, Services};

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Scenario names, e.g. `seed/crash-after-commit` or a group `seed` (all by default).
    pub scenarios: Vec<String>,
    /// The system under test.
    #[arg(long, default_value = "reference")]
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

/// Prints one scenario's result: schedule, trace, invariants, verdict.
pub fn print_outcome(s: &Scenario, o: &ScenarioOutcome) {
    println!("== {}: {}", s.name, s.description);
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
    println!(
        "calls: {} pg, {} sqs, {} redis",
        o.calls.pg, o.calls.sqs, o.calls.redis
    );
    println!("{} {}\n", if o.passed() { "PASS" } else { "FAIL" }, s.name);
}

/// Runs the chosen scenarios against real services and prints each trace and verdict.
/// Exit code 0 when all pass, 1 when an invariant is violated; errors (exit 2) for services
/// or malformed scenarios.
pub fn run(rt: &tokio::runtime::Runtime, opts: &ServiceOptions, args: &RunArgs) -> Result<i32> {
    let dir = scenario::scenarios_dir();
    let chosen = select(scenario::discover(&dir)?, &args.scenarios)?;
    let system = crate::sut::by_name(&args.system)?;
    let services = rt.block_on(Services::start(opts))?;
    let result = (|| {
        services.check_destructive("creating and dropping schemas and queues")?;
        let mut failed = Vec::new();
        for s in &chosen {
            let o = run_scenario(&services.endpoints, system.clone(), s, None)?;
            print_outcome(s, &o);
            if !o.passed() {
                failed.push(s.name.clone());
            }
        }
        let passed = chosen.len() - failed.len();
        println!("{passed} passed, {} failed", failed.len());
        anyhow::Ok(if failed.is_empty() { EXIT_OK } else { EXIT_VIOLATION })
    })();
    rt.block_on(services.stop());
    result
}
