//! The fleet: one turmoil host per worker, reaching the real services through tokio I/O,
//! and one per provider of the workload, reached over turmoil's simulated network.
//!
//! A crash is `Sim::crash`: the host's runtime is dropped with everything on it, so its
//! sockets close (an in-flight SQS message stays invisible until its visibility expires). Its
//! PostgreSQL connection is closed and its backend terminated, which rolls back its open
//! transaction, unless no call was under way: then it is reset as a fresh session (its
//! transaction rolled back) and handed to the next restart ([`crate::namespace::worker_pg`]). A restart is
//! `Sim::bounce`: fresh software that takes such a connection or connects again. A worker's
//! PostgreSQL connection left idle at the schedule's end is kept for the namespace's next
//! schedule. The sockets to the services belong to the I/O
//! runtime, and every host task's wakes reach the scheduler ([`super::io`]).

use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::time::Duration;

use futures_util::FutureExt;
use super::cx::Cx;
use super::programs;
use super::host_spec::HostSpec;
use crate::services::clients;
use crate::sim::cx::Program;
use crate::spec::{role_of, RoleKind};

/// Builds a turmoil simulation with one host per worker name. Hosts start connecting at the
/// first `Sim::step`. Errors: a worker name that matches no role, or a role the system has no
/// program for.
pub fn build<'a>(workers: &[String], spec: Rc<HostSpec>) -> anyhow::Result<turmoil::Sim<'a>> {
    // Each worker's role, and the external process that plays it, if one does.
    let fleet = workers
        .iter()
        .map(|w| {
            let role = role_of(&spec.roles, w).ok_or_else(|| anyhow::anyhow!("worker name `{w}` matches no role"))?;
            anyhow::Ok((w, role, spec.external.iter().find(|e| e.role == role.prefix).cloned()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut builder = turmoil::Builder::new();
    // The hosts' runtimes get tokio I/O only when an external worker's proxies listen on one
    // ([`crate::sim::wire::host`]): in-process workers' sockets live on the I/O runtime
    // ([`super::io`]). With I/O, every host's tick is an `epoll_wait` and every wake from the
    // I/O runtime an `eventfd` write (about 2,200 and 1,200 system calls per payout/explore
    // schedule, strace); without it, a tick with nothing to do and a wake of a
    // runtime that is not parked make none (tokio's `ParkThread`).
    if fleet.iter().any(|(_, _, external)| external.is_some()) {
        builder.enable_tokio_io();
    }
    let mut sim = builder
        // turmoil's clock races ahead during real I/O (GUIDE.md §5); it decides nothing here,
        // so give it room for years of simulated time.
        .simulation_duration(Duration::from_secs(100 * 365 * 86_400))
        .tick_duration(Duration::from_millis(1))
        // The simulated network to the providers: one fixed latency, and a fixed seed for
        // what turmoil still draws, so that provider interleavings repeat exactly.
        .min_message_latency(Duration::from_millis(super::net::LATENCY_MS))
        .max_message_latency(Duration::from_millis(super::net::LATENCY_MS))
        .fail_rate(0.0)
        .rng_seed(0)
        .build();
    for p in &spec.providers {
        let (provider, world) = (p.clone(), spec.world.clone());
        host(&mut sim, p.name(), spec.wake.clone(), move || super::net::host::serve(provider.clone(), world.clone()));
    }
    for (w, role, external) in fleet {
        let prefix = role.prefix;
        let queue = match role.kind {
            RoleKind::Handler { queue } => Some(queue),
            _ => None,
        };
        let (name, spec) = (w.clone(), spec.clone());
        if let Some(ext) = external {
            host(&mut sim, w, spec.wake.clone(), move || {
                let (name, spec, ext) = (name.clone(), spec.clone(), ext.clone());
                async move { crate::sim::wire::host::run(name, ext, queue, spec).await.map_err(|e| format!("{e:#}").into()) }
            });
            continue;
        }
        // Checked here; each start (and restart) of the host then asks for fresh software.
        spec.system
            .program(role.prefix)
            .ok_or_else(|| anyhow::anyhow!("system `{}` has no program for role `{}`", spec.system.name(), role.prefix))?;
        host(&mut sim, w, spec.wake.clone(), move || {
            let (name, spec) = (name.clone(), spec.clone());
            async move {
                let program = spec.system.program(prefix).expect("checked when the fleet was built");
                // A panic in the workload's code is this worker's failure, a harness error
                // that names it, never a pass nor a torn-down process.
                AssertUnwindSafe(host_main(name.clone(), program, queue, spec))
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|p| Err(anyhow::anyhow!("worker {name} panicked: {}", crate::error::panic_text(&*p))))
                    .map_err(|e| format!("{e:#}").into())
            }
        });
    }
    Ok(sim)
}

/// Adds host `name` to `sim`, running the future `software()` makes at each start and restart,
/// with its wakes raising `wake` ([`super::io::Signal::wrap`]; the fleet's is
/// [`HostSpec::wake`]): every host of the fleet is added here, so that no reply waits out the
/// scheduler's pause.
fn host<'a, F, Fut>(sim: &mut turmoil::Sim<'a>, name: &str, wake: std::sync::Arc<super::io::Signal>, software: F)
where
    F: Fn() -> Fut + 'a,
    Fut: std::future::Future<Output = turmoil::Result> + 'static,
{
    sim.host(name, move || wake.wrap(software()));
}

async fn host_main(name: String, program: Program, queue: Option<&'static str>, spec: Rc<HostSpec>) -> anyhow::Result<()> {
    // A connection kept from the namespace's schedule before, else a new one.
    let pg = match spec.pg_kept.take() {
        Some(pg) => pg,
        None => {
            let opts = clients::pg_options(&spec.endpoints.database_url)?.options([("search_path", spec.search_path.as_str())]);
            crate::namespace::worker_pg::connect(opts).await?
        }
    };
    let sqs = clients::sqs_worker_client(&spec.endpoints.sqs_endpoint_url, &spec.sqs_calls);
    // Connected on the I/O runtime, which then runs the connection's driver ([`super::io`]).
    let url = spec.endpoints.redis_url.clone();
    let redis = super::io::on_io(async move { clients::redis_connect(&url).await }).await?;
    let cx = Cx::new(name, spec.world.clone(), pg, spec.pg_kept.clone(), sqs, redis, spec.queues.clone(), spec.config.clone());
    programs::run(program, queue, cx).await;
    Ok(())
}
