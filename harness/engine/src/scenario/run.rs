use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use uuid::Uuid;

use super::Scenario;
use crate::checker::{self, Verdict};
use crate::record::trace;
use crate::schedule::Schedule;
use crate::services::cpu::thread_cpu_ms;
use crate::services::Endpoints;
use crate::sim::scheduler::{Run, Setup};
use crate::record::{history::CallCounts, labels::Labels};
use crate::sim::cx::System;
use crate::spec::{CrashPoint, Event, QueueSpec};

/// The result of running one schedule of a scenario.
#[derive(Debug, Clone)]
pub struct ScenarioOutcome {
    /// Scenario name.
    pub name: String,
    /// The schedule that ran.
    pub schedule: Schedule,
    /// The trace text.
    pub trace: String,
    /// Every invariant's verdict.
    pub verdicts: Vec<Verdict>,
    /// `expect_trace` entries that the trace does not contain.
    pub missing_trace_facts: Vec<String>,
    /// Real calls made by workers.
    pub calls: CallCounts,
    /// Every SQS call of the schedule by operation name, the harness's own included (creating,
    /// probing and deleting the queues; not part of the trace).
    pub sqs_calls: std::collections::BTreeMap<String, u64>,
    /// Simulation steps taken (not part of the trace: how many depends on real latencies).
    pub steps: u64,
    /// Crash points passed (one entry per pass): the worker and the point.
    pub passed: Vec<(String, CrashPoint)>,
    /// Wall time of the schedule (not part of the trace).
    pub wall: Duration,
    /// Wall time by phase (not part of the trace).
    pub phases: Phases,
    /// The recorded history.
    pub history: crate::record::history::History,
    /// The roles whose processes were kept from the schedule before instead of started
    /// ([`crate::sim::wire::keep`]; empty outside [`crate::sim::wire::keep::reusing`]).
    pub reused: std::collections::BTreeSet<&'static str>,
}

/// Where a schedule's wall time went, ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Phases {
    /// Fresh schema with the system's DDL, the workload's queues, admin pools, hosts connected.
    pub setup_ms: f64,
    /// The schedule's decisions and the drain.
    pub run_ms: f64,
    /// The checker reading PostgreSQL.
    pub check_ms: f64,
    /// Resetting the namespace for the next schedule (or dropping it), DEL of the schedule's
    /// Redis keys.
    pub teardown_ms: f64,
    /// CPU time of the harness thread that ran the schedule, by phase, ms: setup, run and
    /// drain, check, teardown. The schedule's hosts all run on that thread; the services'
    /// own CPU is not in it.
    pub cpu_ms: [f64; 4],
}

impl ScenarioOutcome {
    /// True when every invariant holds and every expected trace fact is present.
    pub fn passed(&self) -> bool {
        self.verdicts.iter().all(|v| v.holds) && self.missing_trace_facts.is_empty()
    }
}

/// The scenario's events with ids derived from their labels inside `ns` (a fresh UUID per
/// schedule, so that concurrent runs never share a Redis key), and the labels.
/// Errors: the workload refuses an `[[events]]` table (checked already when the file loaded).
pub fn materialize(s: &Scenario, ns: Uuid) -> Result<(Vec<Event>, Labels)> {
    let mut names = Labels::default();
    let events = s.workload.events(&s.events, ns, &mut names).map_err(|e| anyhow!("{}: field `events`: {e}", s.path.display()))?;
    Ok((events, names))
}

/// The workload's queues with the scenario's visibility timeout, if it sets one, its FIFO
/// queues made FIFO, and its dead-letter queue added last (`[config] dead_letter`).
pub fn queues(s: &Scenario) -> Vec<QueueSpec> {
    let mut queues = s.workload.queues();
    if let Some(v) = s.visibility_timeout_s {
        queues.iter_mut().for_each(|q| q.visibility_timeout_s = v);
    }
    queues.iter_mut().filter(|q| s.fifo_queues.contains(&q.name)).for_each(|q| q.fifo = true);
    if let Some(c) = &s.dead_letter {
        super::dead_letter::apply(c, &mut queues);
    }
    queues
}

/// Runs `schedule` (the scenario's own when `None`) of scenario `s` against `system`:
/// the decisions, then the drain phase, then the checker. In an exploration scenario,
/// decisions that cannot apply are skipped (and the skip is in the trace). The schedule's
/// namespace is removed afterwards whatever happened. Errors: a decision that cannot apply
/// (the message includes the trace so far), a service failure.
pub fn run_scenario(
    endpoints: &Endpoints,
    system: Rc<dyn System>,
    s: &Scenario,
    schedule: Option<&Schedule>,
) -> Result<ScenarioOutcome> {
    let schedule = schedule.unwrap_or(&s.schedule).clone();
    run_driven(endpoints, system, s, |run| {
        for (i, d) in schedule.decisions.iter().enumerate() {
            run.apply(d).map_err(|e| anyhow!("decision {} `{d}`: {e:#}", i + 1))?;
        }
        Ok(schedule.clone())
    })
}

/// Like [`run_scenario`], but the decisions are made by `drive`, which applies them to the
/// run (it may look at the run between decisions) and returns the schedule it applied.
pub(crate) fn run_driven(
    endpoints: &Endpoints,
    system: Rc<dyn System>,
    s: &Scenario,
    drive: impl FnOnce(&mut Run) -> Result<Schedule>,
) -> Result<ScenarioOutcome> {
    let _span = tracing::info_span!("schedule", scenario = %s.name).entered();
    let started = Instant::now();
    let (events, names) = materialize(s, Uuid::new_v4())?;
    let config = s.workload.config(s.config.clone()).map_err(|e| anyhow!("{}: field `config`: {e}", s.path.display()))?;
    for ext in &s.external {
        crate::sim::wire::prepare(ext).map_err(|e| match &ext.origin {
            Some(origin) => anyhow!("{origin}: {e:#}"),
            None => anyhow!("{}: [external.{}]: {e:#}", s.path.display(), ext.role),
        })?;
    }
    let setup = Setup {
        endpoints: endpoints.clone(),
        roles: s.workload.roles(),
        identity: {
            let w = s.workload.clone();
            Box::new(move |body| w.identity(body))
        },
        faults: s.workload.faults(),
        leftovers: s.workload.leftovers(),
        retries_upstream: system.retries_upstream(),
        system,
        config,
        queues: queues(s),
        workers: s.workers.clone(),
        events: events.clone(),
        names,
        external: s.external.clone(),
        config_json: serde_json::to_string(&s.config).unwrap_or_else(|_| "{}".into()),
        logical_now: s.workload.logical_now(),
        prelude_ddl: if s.workload.history_tables() { checker::facts::DDL } else { "" },
        providers: s.workload.providers(),
    };
    let t_setup = Instant::now();
    let mut cpu = [thread_cpu_ms(); 5];
    let mut run = Run::start(setup)?;
    run.lenient = s.explore.is_some();
    let setup_ms = t_setup.elapsed().as_secs_f64() * 1e3;
    cpu[1] = thread_cpu_ms();
    let t_run = Instant::now();
    let driven = drive(&mut run).map_err(|e| anyhow!("{}: {e:#}", s.name));
    let stuck = match &driven {
        Ok(_) => run.drain().map_err(|e| anyhow!("{}: drain: {e:#}", s.name)),
        Err(_) => Ok(None),
    };
    let fin = run.finish();
    let text = trace::render(&fin.history);
    let (schedule, stuck) = match (driven, stuck) {
        (Ok(schedule), Ok(stuck)) => (schedule, stuck),
        (Err(e), _) | (_, Err(e)) => {
            crate::namespace::pool::give_back(fin.admin, &fin.keys, false);
            return Err(anyhow!("{e}\ntrace so far:\n{text}"));
        }
    };
    let run_ms = t_run.elapsed().as_secs_f64() * 1e3;
    cpu[2] = thread_cpu_ms();
    let t_check = Instant::now();
    let invariants = s.invariants();
    if s.workload.history_tables() {
        if let Err(e) = checker::facts::fill(&fin.admin, &fin.history, &events, &fin.provider_calls, &fin.deliveries) {
            crate::namespace::pool::give_back(fin.admin, &fin.keys, false);
            return Err(anyhow!("{}: {e:#}\ntrace:\n{text}", s.name));
        }
    }
    let verdicts = checker::check(&invariants, &fin.admin, &fin.history, &events, &fin.names, &fin.effects, stuck.as_deref());
    let check_ms = t_check.elapsed().as_secs_f64() * 1e3;
    let missing: Vec<String> = s.expect_trace.iter().filter(|f| !text.contains(f.as_str())).cloned().collect();
    let failed: Vec<&str> = verdicts
        .iter()
        .filter(|v| !v.holds)
        .map(|v| v.invariant.as_str())
        .chain((!missing.is_empty()).then_some("the expected trace facts"))
        .collect();
    // The namespace's own view: the one SQS endpoint its queues live on, not every shard.
    if let Some(down) = down_under_a_failure(&fin.admin.endpoints, &failed) {
        tracing::info!(schedule = %schedule, services_down = %down, "schedule checked: a services error, not a verdict");
        crate::namespace::pool::give_back(fin.admin, &fin.keys, false);
        let failed = failed.join("`, `");
        return Err(anyhow!("{}: `{failed}` broke while {down} accepted no connections: a services error, not the handler's verdict\ntrace:\n{text}", s.name));
    }
    cpu[3] = thread_cpu_ms();
    let t_teardown = Instant::now();
    let sqs_calls = crate::namespace::pool::give_back(fin.admin, &fin.keys, stuck.is_none());
    cpu[4] = thread_cpu_ms();
    let cpu_ms = [cpu[1] - cpu[0], cpu[2] - cpu[1], cpu[3] - cpu[2], cpu[4] - cpu[3]];
    let phases = Phases { setup_ms, run_ms, check_ms, teardown_ms: t_teardown.elapsed().as_secs_f64() * 1e3, cpu_ms };
    tracing::debug!(
        scenario = %s.name,
        ?phases,
        total_ms = started.elapsed().as_secs_f64() * 1e3,
        "schedule timing (setup: schema + queues + hosts connected; teardown: drop schema, delete queues)"
    );
    tracing::info!(schedule = %schedule, passed = verdicts.iter().all(|v| v.holds), "schedule checked");
    if let Some(why) = verdicts.iter().find_map(|v| v.unknown.as_ref().map(|r| format!("invariant `{}` could not decide: {r}", v.invariant))) {
        return Err(anyhow!("{}: {why}", s.name));
    }
    Ok(ScenarioOutcome {
        name: s.name.clone(),
        schedule,
        trace: text,
        verdicts,
        missing_trace_facts: missing,
        calls: fin.calls,
        sqs_calls,
        steps: fin.steps,
        passed: fin.passed,
        wall: started.elapsed(),
        phases,
        history: fin.history,
        reused: fin.reused,
    })
}

/// The services that no longer accept connections (`Redis at 127.0.0.1:6379`, joined by
/// " and "; see [`Endpoints::unreachable`]), asked only when `failed` (what the schedule
/// broke: invariants, or its expected trace facts) is not empty; `None` when nothing failed or
/// every service answers. A service killed under a schedule makes even a correct handler fail
/// (a worker whose Redis is gone can neither lock nor finish, and the drain ends short of
/// quiescence). Such a failure is not the handler's: the caller makes it a services error,
/// never a failure to shrink or to save as a regression.
fn down_under_a_failure(endpoints: &Endpoints, failed: &[&str]) -> Option<String> {
    if failed.is_empty() {
        return None;
    }
    let down = endpoints.unreachable();
    (!down.is_empty()).then(|| down.join(" and "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port where nothing listens: bound without `listen`, and held until the test ends,
    /// so no other test can take it and a connection to it is refused.
    fn refusing() -> (tokio::net::TcpSocket, u16) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = socket.local_addr().unwrap().port();
        (socket, port)
    }

    /// Services down and something broken: each is named, in the order of the endpoints, the
    /// SQS shards included. Services down and nothing broken: nothing is asked. Every service
    /// up: what broke stays the handler's verdict.
    #[test]
    fn a_failure_with_services_down_names_them() {
        let up = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = |scheme: &str, port: u16| format!("{scheme}://127.0.0.1:{port}");
        let listening = up.local_addr().unwrap().port();
        let mut e = Endpoints {
            database_url: url("postgres", listening),
            sqs_endpoint_url: url("http", listening),
            sqs_shards: vec![url("http", listening)],
            redis_url: url("redis", listening),
        };
        assert_eq!(down_under_a_failure(&e, &["quiescence"]), None);
        let ((_shard, shard), (_redis, redis)) = (refusing(), refusing());
        e.sqs_shards.push(url("http", shard));
        e.redis_url = url("redis", redis);
        assert_eq!(
            down_under_a_failure(&e, &["quiescence", "the expected trace facts"]),
            Some(format!("SQS at 127.0.0.1:{shard} and Redis at 127.0.0.1:{redis}"))
        );
        assert_eq!(down_under_a_failure(&e, &[]), None);
    }
}
