//! The turmoil host of an external worker: its three proxies, on loopback ports chosen by the
//! system, and its process. A crash of the host (`Sim::crash`) drops all of it: the proxies'
//! sockets close (PostgreSQL rolls back the open transaction) and the process group is killed.
//! At a schedule's end, a role declared `reuse = true` leaves its running process and listening
//! sockets for the namespace's next schedule instead ([`super::keep`]).

use std::rc::Rc;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};

use super::keep::{Kept, Listeners, Shelf};
use super::process::WorkerProcess;
use crate::services::native::process::tail;
use super::external::External;
use super::sqs::SqsProxy;
use super::worker::WireWorker;
use super::{pg, redis, sqs};
use crate::services::clients;
use crate::sim::host_spec::HostSpec;

/// How often the host looks whether its process exited by itself, simulated ms.
const EXIT_POLL_MS: u64 = 20;

/// Runs external worker `name` (role `ext`, receiving from `queue` if it is a handler) until
/// the host is crashed. A process that exits by itself after the worker made a call is
/// reported to the scheduler ([`crate::sim::world::Mailbox::exited`]) and the host waits to be
/// ended. Errors: a port that cannot be bound, a command that cannot start, a process that
/// exits by itself before the worker's first call (with the last lines of its log).
pub async fn run(name: String, ext: std::sync::Arc<External>, queue: Option<&'static str>, spec: Rc<HostSpec>) -> Result<()> {
    let (command, extra) = ext.for_system(spec.system.name());
    // Everything it would be started with but its proxies' ports (the kept listeners keep
    // theirs): the queue URLs of its role, the system, the configuration, the search_path in
    // DATABASE_URL.
    let started_as: Vec<(String, String)> = environment(&name, &spec, 0, 0, 0)?.into_iter().chain(extra.iter().cloned()).collect();
    let key = Kept::key(&name, &command, &ext.cwd, &started_as);
    let kept = spec.processes.take(&key);
    let reused = kept.is_some();
    let hooks = super::webhook::of_role(&spec.providers, ext.role);
    let worker = Rc::new(WireWorker::new(name.clone(), spec.world.clone(), ext.clone(), queue, spec.queues.clone(), spec.identity.clone()));
    let kept = match kept {
        Some(k) => k,
        None => {
            let listeners = Listeners::bind(spec.providers.len(), super::webhook::port_envs(&hooks).len())?;
            let (pg_port, sqs_port, redis_port) = listeners.ports()?;
            let env = environment(&name, &spec, pg_port, sqs_port, redis_port)?;
            let providers = super::http::environment(&spec.providers, &listeners.provider_ports()?);
            let endpoints = super::webhook::environment(&hooks, &listeners.hooks);
            let env: Vec<(String, String)> = env.into_iter().chain(providers).chain(endpoints).chain(extra).collect();
            let log = super::process::logs_dir()?.join(format!("{}-{name}.log", spec.schema));
            let process = WorkerProcess::spawn(&command, &ext.cwd, &env, log)?;
            worker.started(&process);
            tracing::info!(worker = %name, pid = process.pid(), log = %process.log.display(), command = %command.join(" "), "external worker started");
            Kept::new(key, ext.role, process, listeners)
        }
    };
    let ([pg_l, sqs_l, redis_l], provider_ls) = kept.listeners.for_runtime()?;
    {
        use std::os::fd::AsRawFd;
        let fds = [&pg_l, &sqs_l, &redis_l].into_iter().chain(&provider_ls).map(|l| l.as_raw_fd()).collect();
        worker.listening(fds);
    }
    for (l, p) in provider_ls.into_iter().zip(&spec.providers) {
        tokio::task::spawn_local(super::http::serve(l, p.clone(), worker.clone()));
    }
    let envs = super::webhook::port_envs(&hooks);
    for h in hooks {
        let port = envs.iter().position(|v| *v == h.port_env).and_then(|i| kept.listeners.hooks.get(i).copied());
        if let Some(port) = port {
            tokio::task::spawn_local(super::webhook::serve(worker.clone(), h, port));
        }
    }
    let e = &spec.endpoints;
    tokio::task::spawn_local(pg::serve(pg_l, host_port(&e.database_url, 5432)?, worker.clone()));
    let proxy = SqsProxy::new(worker.clone(), host_port(&e.sqs_endpoint_url, 4566)?, clients::sqs_client_counted(&e.sqs_endpoint_url, &spec.sqs_calls));
    tokio::task::spawn_local(sqs::serve(sqs_l, Rc::new(proxy)));
    tokio::task::spawn_local(redis::serve(redis_l, host_port(&e.redis_url, 6379)?, worker.clone()));
    spec.world.borrow_mut().mailbox(&name).process_pid = Some(kept.process.pid());
    if reused {
        tracing::debug!(worker = %name, pid = kept.process.pid(), "external worker kept from the namespace's schedule before");
    }
    // The host's end (a crash, or the schedule's end) drops this: the process is killed, or
    // kept for the next schedule when the schedule ends with it running and its role reusable.
    let mut running = Running { kept: Some(kept), shelf: spec.processes.clone(), reuse: ext.reuse };
    loop {
        tokio::time::sleep(Duration::from_millis(EXIT_POLL_MS)).await;
        let process = running.process();
        if let Some(status) = process.exited() {
            process.keep_log();
            let log = process.log.clone();
            let last = tail(&log, 15);
            if !spec.world.borrow_mut().mailbox(&name).made_calls {
                if reused {
                    bail!(
                        "external worker {name} exited by itself ({status}) before its first call in this schedule, on a process kept \
                         from the schedule before (role `{}` declares `reuse = true`): it does not survive its connections being \
                         closed between schedules; remove `reuse = true`, or let it reconnect; the last lines of {}:\n{last}",
                        ext.role,
                        log.display()
                    );
                }
                bail!("external worker {name} exited by itself before its first call ({status}): it cannot start; the last lines of {}:\n{last}", log.display());
            }
            // A finding, not a harness error: the scheduler ends this host as a crash the
            // worker caused itself (a pod in a crash loop), and the check names it.
            tracing::info!(worker = %name, %status, "external worker exited by itself");
            spec.world.borrow_mut().mailbox(&name).exited = Some((status.to_string(), last));
            std::future::pending::<()>().await;
        }
    }
}

/// A host's process while the host runs ([`run`]).
struct Running {
    kept: Option<Kept>,
    shelf: Rc<Shelf>,
    /// Whether its role declares `reuse = true`.
    reuse: bool,
}

impl Running {
    fn process(&mut self) -> &mut WorkerProcess {
        &mut self.kept.as_mut().expect("taken only when dropped").process
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut k) = self.kept.take() {
            if self.reuse && k.process.exited().is_none() {
                self.shelf.leave(k);
            }
        }
    }
}

/// `host:port` of a service URL.
fn host_port(url: &str, default_port: u16) -> Result<String> {
    let u = url::Url::parse(url).map_err(|e| anyhow!("service URL `{url}`: {e}"))?;
    Ok(format!("{}:{}", u.host_str().unwrap_or("127.0.0.1"), u.port().unwrap_or(default_port)))
}

/// The variables [`environment`] sets for every worker, besides those named `CRASHPOINT_…`: a
/// workload's own variables (a webhook's port) may not be one of them.
pub const RESERVED_ENV: &[&str] = &[
    "DATABASE_URL",
    "AWS_ENDPOINT_URL_SQS",
    "SQS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_EC2_METADATA_DISABLED",
    "REDIS_URL",
    "PYTHONUNBUFFERED",
];

/// The environment an external worker finds its services in, all through its proxies:
/// `DATABASE_URL` (libpq URI with `sslmode=disable` and the schedule's search_path),
/// `AWS_ENDPOINT_URL_SQS` and test credentials, `CRASHPOINT_QUEUE_URL` (its role's queue) and
/// `CRASHPOINT_QUEUE_URL_<NAME>` for each queue, `REDIS_URL`, `CRASHPOINT_SYSTEM`,
/// `CRASHPOINT_WORKER` and `CRASHPOINT_CONFIG` (the scenario's `[config]` as JSON). The providers'
/// URLs are added at spawn ([`super::http::environment`]).
fn environment(name: &str, spec: &HostSpec, pg: u16, sqs: u16, redis: u16) -> Result<Vec<(String, String)>> {
    let mut db = url::Url::parse(&spec.endpoints.database_url)?;
    db.set_host(Some("127.0.0.1"))?;
    db.set_port(Some(pg)).map_err(|_| anyhow!("cannot set the port of the database URL"))?;
    db.query_pairs_mut().clear().append_pair("sslmode", "disable").append_pair("options", &format!("-csearch_path={}", spec.search_path));
    let mut rd = url::Url::parse(&spec.endpoints.redis_url)?;
    rd.set_host(Some("127.0.0.1"))?;
    rd.set_port(Some(redis)).map_err(|_| anyhow!("cannot set the port of the Redis URL"))?;
    let endpoint = format!("http://127.0.0.1:{sqs}");
    let proxied = |real: &str| -> String {
        let path = url::Url::parse(real).map(|u| u.path().to_string()).unwrap_or_default();
        format!("{endpoint}{path}")
    };
    let mut env = vec![
        ("DATABASE_URL".to_string(), db.to_string()),
        ("AWS_ENDPOINT_URL_SQS".into(), endpoint.clone()),
        // crashpoint's own names for it too, so that a worker reading them (inherited from a
        // shell that ran `crashpoint up`) reaches the proxy, not another LocalStack instance.
        ("SQS_ENDPOINT_URL".into(), endpoint.clone()),
        (crate::services::external::SQS_SHARDS_VAR.into(), String::new()),
        ("AWS_ACCESS_KEY_ID".into(), "test".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "test".into()),
        ("AWS_DEFAULT_REGION".into(), "us-east-1".into()),
        ("AWS_REGION".into(), "us-east-1".into()),
        ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
        ("REDIS_URL".into(), rd.to_string()),
        ("CRASHPOINT_WORKER".into(), name.to_string()),
        ("CRASHPOINT_SYSTEM".into(), spec.system.name().to_string()),
        ("CRASHPOINT_CONFIG".into(), spec.config_json.clone()),
        ("PYTHONUNBUFFERED".into(), "1".into()),
    ];
    let role = crate::spec::role_of(&spec.roles, name);
    for (q, url, _) in &spec.queues.queues {
        let var = format!("CRASHPOINT_QUEUE_URL_{}", q.to_ascii_uppercase().replace('-', "_"));
        env.push((var, proxied(url)));
        if matches!(role.map(|r| r.kind), Some(crate::spec::RoleKind::Handler { queue }) if queue == *q) {
            env.push(("CRASHPOINT_QUEUE_URL".into(), proxied(url)));
        }
    }
    Ok(env)
}
