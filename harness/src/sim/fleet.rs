//! The fleet: one turmoil host per worker, reaching the real services through tokio I/O.
//!
//! A crash is `Sim::crash`: the host's runtime is dropped with everything on it, so its
//! sockets close (PostgreSQL rolls back its open transaction; an in-flight SQS message stays
//! invisible until its visibility expires). A restart is `Sim::bounce`: fresh software that
//! connects again. Connections are created inside the host future so that a crash closes them.

use std::rc::Rc;
use std::time::Duration;

use sqlx::ConnectOptions;

use super::cx::{Cx, QueueUrls};
use super::programs::{self, Role};
use super::world::SharedWorld;
use crate::services::{clients, Endpoints};
use crate::sut::{System, SystemConfig};

/// What every host needs to start its software.
pub struct HostSpec {
    /// Where the services listen.
    pub endpoints: Endpoints,
    /// The schedule's PostgreSQL schema (the search_path of every worker connection).
    pub schema: String,
    /// The schedule's queues.
    pub queues: QueueUrls,
    /// Timing and retries.
    pub config: Rc<SystemConfig>,
    /// The state shared with the scheduler.
    pub world: SharedWorld,
    /// The system under test.
    pub system: Rc<dyn System>,
}

/// Builds a turmoil simulation with one host per worker name, tokio I/O enabled so that the
/// hosts reach the real services. Hosts start connecting at the first `Sim::step`.
pub fn build<'a>(workers: &[String], spec: Rc<HostSpec>) -> turmoil::Sim<'a> {
    let mut sim = turmoil::Builder::new()
        .enable_tokio_io()
        // turmoil's clock races ahead during real I/O (GUIDE.md §5); it decides nothing here,
        // so give it room for years of simulated time.
        .simulation_duration(Duration::from_secs(100 * 365 * 86_400))
        .tick_duration(Duration::from_millis(1))
        .build();
    for w in workers {
        let role = Role::of(w).unwrap_or_else(|| panic!("worker name {w} has no role"));
        let (name, spec) = (w.clone(), spec.clone());
        sim.host(w.as_str(), move || {
            let (name, spec) = (name.clone(), spec.clone());
            async move { host_main(name, role, spec).await.map_err(|e| format!("{e:#}").into()) }
        });
    }
    sim
}

async fn host_main(name: String, role: Role, spec: Rc<HostSpec>) -> anyhow::Result<()> {
    let opts = clients::pg_options(&spec.endpoints.database_url)?
        .options([("search_path", spec.schema.as_str())]);
    let pg = opts.connect().await?;
    let sqs = clients::sqs_client(&spec.endpoints.sqs_endpoint_url);
    let redis = clients::redis_connect(&spec.endpoints.redis_url).await?;
    let cx = Cx::new(name, spec.world.clone(), pg, sqs, redis, spec.queues.clone(), spec.config.clone())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    programs::run(role, cx, spec.system.clone()).await;
    Ok(())
}
