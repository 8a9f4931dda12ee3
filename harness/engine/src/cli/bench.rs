//! `crashpoint bench`: throughput of exploration on the real services, where the time goes,
//! and (with `--min-rate`) a floor that fails the command. Speed targets live here, not in
//! timed tests.

use std::path::PathBuf;

use anyhow::{anyhow, Result};
use serde::Serialize;

use super::run::with_services;
use crate::error::{EXIT_OK, EXIT_VIOLATION};
use crate::explore::{self, Options, Stats};
use crate::scenario::{self, Phases};
use crate::services::{clients::ServiceClients, ServiceOptions};

/// Arguments of `bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Schedules to run.
    #[arg(long, default_value_t = 200)]
    pub schedules: u64,
    /// The exploration scenario (default: `<default workload>/explore`).
    #[arg(long)]
    pub scenario: Option<String>,
    /// Run seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Exit 1 when throughput is below this many schedules/s.
    #[arg(long)]
    pub min_rate: Option<f64>,
    /// Where the JSON result goes.
    #[arg(long, default_value = "reports/bench.json")]
    pub out: PathBuf,
}

/// Median and 90th percentile, ms.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    /// Median, ms.
    pub p50_ms: f64,
    /// 90th percentile, ms.
    pub p90_ms: f64,
}

fn spread(mut v: Vec<f64>) -> Spread {
    if v.is_empty() {
        return Spread { p50_ms: 0.0, p90_ms: 0.0 };
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    Spread { p50_ms: at(0.5), p90_ms: at(0.9) }
}

/// What `bench.json` holds.
#[derive(Debug, Serialize)]
pub struct BenchResult {
    /// Scenario explored.
    pub scenario: String,
    /// Run seed.
    pub seed: u64,
    /// Schedules run.
    pub schedules: u64,
    /// Wall time, s.
    pub wall_s: f64,
    /// Schedules per second.
    pub schedules_per_s: f64,
    /// Mean real calls per schedule: PostgreSQL, SQS, Redis.
    pub calls_per_schedule: [f64; 3],
    /// Mean HTTP requests to the workload's providers per schedule (simulated network).
    pub http_per_schedule: f64,
    /// Per-phase wall time of a schedule.
    pub setup: Spread,
    /// Decisions and drain.
    pub run: Spread,
    /// Checker.
    pub check: Spread,
    /// Teardown.
    pub teardown: Spread,
    /// One round trip to each service (median of 5), µs: PostgreSQL, SQS, Redis.
    pub round_trip_us: [u128; 3],
}

fn result(scenario: &str, args: &BenchArgs, st: &Stats, rtt: [u128; 3]) -> BenchResult {
    let (pg, sqs, redis) = st.calls_per_schedule();
    let of = |f: fn(&Phases) -> f64| spread(st.phases.iter().map(f).collect());
    BenchResult {
        scenario: scenario.to_string(),
        seed: args.seed,
        schedules: st.schedules,
        wall_s: st.wall.as_secs_f64(),
        schedules_per_s: st.per_second(),
        calls_per_schedule: [pg, sqs, redis],
        http_per_schedule: st.net_per_schedule(),
        setup: of(|p| p.setup_ms),
        run: of(|p| p.run_ms),
        check: of(|p| p.check_ms),
        teardown: of(|p| p.teardown_ms),
        round_trip_us: rtt,
    }
}

/// Explores `--scenario` on the reference for `--schedules` schedules, prints throughput and
/// where a schedule's time goes, writes `--out`. Exit 1 when below `--min-rate` or when the
/// reference fails; 2 on a harness or services error.
pub fn bench(rt: &tokio::runtime::Runtime, opts: &ServiceOptions, args: &BenchArgs, registry: &crate::workload::Registry) -> Result<i32> {
    let name = match &args.scenario {
        Some(n) => n.clone(),
        None => format!("{}/explore", registry.default_workload().map(|w| w.name()).unwrap_or_default()),
    };
    let s = scenario::discover(&scenario::scenarios_dir(), registry)?
        .into_iter()
        .find(|s| s.name == name && s.explore.is_some())
        .ok_or_else(|| anyhow!("no exploration scenario `{name}`"))?;
    with_services(rt, opts, |endpoints| {
        let rtt = rt.block_on(async {
            let c = ServiceClients::connect(endpoints).await?;
            let l = c.ping().await?;
            c.pg.close().await;
            anyhow::Ok([l.postgres_us, l.sqs_us, l.redis_us])
        })?;
        let options = Options { schedules: Some(args.schedules), seed: args.seed, ..Options::default() };
        let r = explore::explore(endpoints, scenario::system_of(&s, "reference")?, &s, &options, |_| {})?;
        let b = result(&s.name, args, &r.stats, rtt);
        println!("bench {} (reference), seed {}: {} schedules in {:.1} s = {:.2} schedules/s", b.scenario, b.seed, b.schedules, b.wall_s, b.schedules_per_s);
        println!(
            "  calls per schedule: {:.1} pg, {:.1} sqs, {:.1} redis, {:.1} http (simulated network)",
            b.calls_per_schedule[0], b.calls_per_schedule[1], b.calls_per_schedule[2], b.http_per_schedule
        );
        println!("  round trips: pg {} µs, sqs {} µs, redis {} µs", rtt[0], rtt[1], rtt[2]);
        println!("  per schedule, median / p90 ms:");
        for (name, sp) in [("setup", b.setup), ("run + drain", b.run), ("check", b.check), ("teardown", b.teardown)] {
            println!("    {name:<12} {:>7.1} / {:>7.1}", sp.p50_ms, sp.p90_ms);
        }
        if let Some(dir) = args.out.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&args.out, serde_json::to_string_pretty(&b)? + "\n")?;
        println!("written to {}", args.out.display());
        if r.failure.is_some() {
            println!("FAIL: the reference violated an invariant; run `crashpoint run {}` to see it", s.name);
            return Ok(EXIT_VIOLATION);
        }
        match args.min_rate {
            Some(min) if b.schedules_per_s < min => {
                println!("FAIL: {:.2} schedules/s is below --min-rate {min}", b.schedules_per_s);
                Ok(EXIT_VIOLATION)
            }
            _ => Ok(EXIT_OK),
        }
    })
}
