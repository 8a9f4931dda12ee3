//! `crashpoint bench`: throughput of exploration on the real services, where the time goes,
//! and (with `--min-rate`) a floor that fails the command. Speed targets live here, not in
//! timed tests.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{anyhow, Result};
use serde::Serialize;

use super::run::with_services;
use crate::error::{EXIT_OK, EXIT_VIOLATION};
use crate::explore::{self, Options, Stats};
use crate::scenario::{self, Phases};
use crate::services::cpu::{CpuProbe, CpuTimes};
use crate::sim::scheduler::quiet;
use crate::sim::wire::process::{team_cpu, TeamCpu};
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
    /// Schedules run at once, each in its own slot (thread, turmoil simulation, schema and
    /// queues). Default: two per core.
    #[arg(long, default_value_t = crate::explore::default_jobs())]
    pub jobs: usize,
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
    /// Mean CPU time of the harness thread per schedule by phase (setup, run + drain, check,
    /// teardown), ms.
    pub phase_cpu_ms: [f64; 4],
    /// One round trip to each service (median of 5), µs: PostgreSQL, SQS, Redis.
    pub round_trip_us: [u128; 3],
    /// Every SQS call per schedule by operation, the harness's own included (mean).
    pub sqs_per_schedule: BTreeMap<String, f64>,
    /// The I/O floor of one schedule: its calls times the measured round trips, ms.
    pub io_floor_ms: f64,
    /// Wall time per schedule over the I/O floor (1.0: the harness adds nothing).
    pub wall_over_io_floor: f64,
    /// CPU per schedule, ms, from `/proc` (a service not found is `null`).
    pub cpu_per_schedule: CpuTimes,
    /// Simulation steps per schedule (each ticks every host's runtime).
    pub steps_per_schedule: f64,
    /// Which one limits throughput: the process nearest to using all the cores it can use.
    pub ceiling: String,
    /// LocalStack instances the namespaces spread over ([`crate::services::Endpoints::sqs_endpoints`]).
    pub localstack_instances: usize,
    /// The team's worker processes (a declared workload's external roles), per schedule;
    /// `null` for an in-process workload.
    pub team: Option<TeamPerSchedule>,
    /// Waiting for a concurrent worker's process to be quiet, per schedule: reads of its
    /// threads in `/proc`, and the harness CPU they took, ms (part of the harness's CPU).
    pub quiet_reads: f64,
    /// See [`BenchResult::quiet_reads`].
    pub quiet_cpu_ms: f64,
}

/// What the team's processes cost per schedule ([`crate::sim::wire::process::TeamCpu`]).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TeamPerSchedule {
    /// Processes started (a schedule's workers, and a restart after each crash).
    pub processes: f64,
    /// CPU from exec to the first call at a proxy, ms: the runtime, its libraries, the
    /// connections opened.
    pub start_cpu_ms: f64,
    /// CPU after that, ms: handling the schedule's calls, timers, polls.
    pub run_cpu_ms: f64,
    /// Wall time from exec to the first call, ms, summed over the processes.
    pub start_wall_ms: f64,
}

/// The process nearest to its ceiling, with how much of it is used: each of the `localstacks`
/// LocalStack instances is one Python process (one core at most, GIL), the harness runs
/// `slots` schedules at once, PostgreSQL and the whole machine have every core.
/// With a team's processes (`team`), the time a schedule's slot waits for them to start is a
/// ceiling too: their start's wall time over the slots' wall time.
fn ceiling(cpu: &CpuTimes, team: Option<&TeamPerSchedule>, wall_ms: f64, slots: usize, localstacks: usize) -> String {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
    let team_cpu = team.map_or(0.0, |t| t.start_cpu_ms + t.run_cpu_ms);
    let total = cpu.harness_ms + cpu.localstack_ms.unwrap_or(0.0) + cpu.postgres_ms.unwrap_or(0.0) + cpu.redis_ms.unwrap_or(0.0) + team_cpu;
    let candidates = [
        ("harness CPU", Some(cpu.harness_ms), (slots as f64).min(cores)),
        // Namespaces spread over the instances, so as many are busy as slots at most.
        ("LocalStack CPU", cpu.localstack_ms, (localstacks.min(slots) as f64).clamp(1.0, cores)),
        ("PostgreSQL CPU", cpu.postgres_ms, cores),
        ("the team's processes starting (exec to first call)", team.map(|t| t.start_wall_ms), slots as f64),
        ("the machine's cores", Some(total), cores),
    ];
    let (name, used) = candidates
        .iter()
        .filter_map(|(n, ms, c)| Some((*n, (*ms)? / (wall_ms * c).max(1e-9))))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or(("unknown", 0.0));
    format!("{name} ({:.0}% used)", used * 100.0)
}

/// What was read around an exploration: the processes' CPU, the team's processes' and the
/// cost of waiting for quiet ([`quiet::cost`]), each as a difference.
struct Readings {
    cpu: CpuTimes,
    team: TeamCpu,
    quiet: (u64, f64),
}

fn result(scenario: &str, args: &BenchArgs, st: &Stats, rtt: [u128; 3], read: Readings, localstacks: usize) -> BenchResult {
    let Readings { cpu, team, quiet } = read;
    let (pg, sqs, redis) = st.calls_per_schedule();
    let of = |f: fn(&Phases) -> f64| spread(st.phases.iter().map(f).collect());
    let n = st.schedules.max(1) as f64;
    let per = |ms: f64| ms / n;
    let sqs_all: f64 = st.sqs_calls.values().sum::<u64>() as f64 / n;
    let io_floor_ms = (pg * rtt[0] as f64 + sqs_all * rtt[1] as f64 + redis * rtt[2] as f64) / 1e3;
    let wall_ms = st.wall.as_secs_f64() * 1e3 / n;
    let cpu_per = CpuTimes {
        harness_ms: per(cpu.harness_ms),
        localstack_ms: cpu.localstack_ms.map(per),
        postgres_ms: cpu.postgres_ms.map(per),
        redis_ms: cpu.redis_ms.map(per),
    };
    let team = (team.processes > 0).then(|| TeamPerSchedule {
        processes: team.processes as f64 / n,
        start_cpu_ms: per(team.start_ms),
        run_cpu_ms: per(team.total_ms - team.start_ms),
        start_wall_ms: per(team.start_wall_ms),
    });
    BenchResult {
        team,
        quiet_reads: quiet.0 as f64 / n,
        quiet_cpu_ms: per(quiet.1),
        sqs_per_schedule: st.sqs_calls.iter().map(|(op, c)| (op.clone(), *c as f64 / n)).collect(),
        io_floor_ms,
        wall_over_io_floor: wall_ms / io_floor_ms.max(1e-9),
        ceiling: ceiling(&cpu_per, team.as_ref(), wall_ms, args.jobs.max(1), localstacks),
        localstack_instances: localstacks,
        steps_per_schedule: st.steps as f64 / n,
        cpu_per_schedule: cpu_per,
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
        phase_cpu_ms: std::array::from_fn(|i| st.phases.iter().map(|p| p.cpu_ms[i]).sum::<f64>() / n),
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
        let options = Options { schedules: Some(args.schedules), seed: args.seed, jobs: args.jobs, ..Options::default() };
        let probe = CpuProbe::new(endpoints);
        let (before, team_before, quiet_before) = (probe.read(), team_cpu(), quiet::cost());
        let r = explore::explore(endpoints, scenario::system_of(&s, "reference")?, &s, &options, |_| {})?;
        let team = team_cpu().since(&team_before);
        let quiet = (quiet::cost().0 - quiet_before.0, quiet::cost().1 - quiet_before.1);
        let read = Readings { cpu: probe.read().since(&before), team, quiet };
        let b = result(&s.name, args, &r.stats, rtt, read, endpoints.sqs_endpoints().count());
        println!(
            "bench {} (reference), seed {}, {} slot(s): {} schedules in {:.1} s = {:.2} schedules/s",
            b.scenario, b.seed, args.jobs, b.schedules, b.wall_s, b.schedules_per_s
        );
        println!(
            "  calls per schedule: {:.1} pg, {:.1} sqs, {:.1} redis, {:.1} http to providers",
            b.calls_per_schedule[0], b.calls_per_schedule[1], b.calls_per_schedule[2], b.http_per_schedule
        );
        let ops: Vec<String> = b.sqs_per_schedule.iter().map(|(op, n)| format!("{op} {n:.1}")).collect();
        println!("  sqs calls per schedule, harness included: {:.1} = {}", b.sqs_per_schedule.values().sum::<f64>(), ops.join(", "));
        println!("  round trips: pg {} µs, sqs {} µs, redis {} µs", rtt[0], rtt[1], rtt[2]);
        println!("  I/O floor {:.1} ms per schedule; wall per slot is {:.1}x that", b.io_floor_ms, b.wall_over_io_floor * args.jobs as f64);
        let c = &b.cpu_per_schedule;
        let ms = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.1} ms"));
        println!(
            "  CPU per schedule: harness {:.1} ms, LocalStack {} ({} instance(s)), PostgreSQL {}, Redis {}",
            c.harness_ms, ms(c.localstack_ms), b.localstack_instances, ms(c.postgres_ms), ms(c.redis_ms)
        );
        if let Some(t) = &b.team {
            println!(
                "  the team's processes per schedule: {:.1} started; CPU {:.1} ms starting (exec to first call, {:.1} ms wall) + {:.1} ms running",
                t.processes, t.start_cpu_ms, t.start_wall_ms, t.run_cpu_ms
            );
            println!("  waiting for their quiet: {:.0} /proc reads per schedule, {:.1} ms of the harness's CPU", b.quiet_reads, b.quiet_cpu_ms);
        }
        println!("  simulation steps per schedule: {:.0}", b.steps_per_schedule);
        println!("  ceiling: {}", b.ceiling);
        println!("  per schedule, wall median / p90 ms, harness thread CPU mean ms:");
        let phases = [("setup", b.setup), ("run + drain", b.run), ("check", b.check), ("teardown", b.teardown)];
        for ((name, sp), cpu) in phases.into_iter().zip(b.phase_cpu_ms) {
            println!("    {name:<12} {:>7.1} / {:>7.1}   cpu {cpu:>6.1}", sp.p50_ms, sp.p90_ms);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A declared exploration whose slots spend most of their time waiting for the team's
    /// processes to start names that as its ceiling, not the cores.
    #[test]
    fn a_schedule_that_waits_on_its_processes_start_names_it_as_its_ceiling() {
        let cpu = CpuTimes { harness_ms: 40.0, localstack_ms: Some(30.0), postgres_ms: Some(10.0), redis_ms: Some(1.0) };
        let team = TeamPerSchedule { processes: 2.6, start_cpu_ms: 200.0, run_cpu_ms: 100.0, start_wall_ms: 1500.0 };
        // 400 ms of wall time per schedule on 4 slots: 1600 ms of slot time, 1500 of it waiting.
        let c = ceiling(&cpu, Some(&team), 400.0, 4, 2);
        assert!(c.starts_with("the team's processes starting (exec to first call) (94% used)"), "{c}");
        assert!(!ceiling(&cpu, None, 400.0, 4, 2).contains("team"));
    }
}
