//! The containers provider: PostgreSQL, LocalStack and Redis through testcontainers.
//!
//! Needs a reachable Docker engine ([`super::docker::engine_status`]). The containers are
//! removed when [`ContainerServices`] is dropped (testcontainers' own drop behaviour).

use anyhow::{Context, Result};
use testcontainers::{runners::AsyncRunner, ContainerAsync, ImageExt};
use testcontainers_modules::{localstack::LocalStack, postgres::Postgres, redis::Redis};

use super::Endpoints;

/// The LocalStack image tag, the same version as the native provider's venv.
pub const LOCALSTACK_TAG: &str = super::native::localstack::VERSION;
/// The PostgreSQL image tag.
pub const POSTGRES_TAG: &str = "15-alpine";
/// The Redis image tag.
pub const REDIS_TAG: &str = "7-alpine";

/// The three running containers.
pub struct ContainerServices {
    /// Where they listen (on the Docker host).
    pub endpoints: Endpoints,
    pg: ContainerAsync<Postgres>,
    localstack: ContainerAsync<LocalStack>,
    redis: ContainerAsync<Redis>,
}

impl ContainerServices {
    /// Starts the three containers and waits for their ready conditions.
    /// Errors: the engine refuses, an image cannot be pulled, a container does not become ready.
    pub async fn start() -> Result<ContainerServices> {
        let pg = Postgres::default()
            .with_tag(POSTGRES_TAG)
            .start()
            .await
            .context("starting the PostgreSQL container")?;
        let localstack = super::native::localstack::LEAN
            .iter()
            .fold(LocalStack::default().with_tag(LOCALSTACK_TAG).with_env_var("SERVICES", "sqs"), |c, (k, v)| c.with_env_var(*k, *v))
            .start()
            .await
            .context("starting the LocalStack container")?;
        let redis = Redis::default()
            .with_tag(REDIS_TAG)
            .start()
            .await
            .context("starting the Redis container")?;
        let host = pg.get_host().await?;
        let endpoints = Endpoints {
            database_url: format!(
                "postgres://postgres:postgres@{host}:{}/postgres",
                pg.get_host_port_ipv4(5432).await?
            ),
            sqs_endpoint_url: format!(
                "http://{}:{}",
                localstack.get_host().await?,
                localstack.get_host_port_ipv4(4566).await?
            ),
            // One LocalStack container: a second would be started and stopped the same way.
            sqs_shards: Vec::new(),
            redis_url: format!(
                "redis://{}:{}/0",
                redis.get_host().await?,
                redis.get_host_port_ipv4(6379).await?
            ),
        };
        Ok(ContainerServices { endpoints, pg, localstack, redis })
    }

    /// Stops and removes the containers.
    pub async fn stop(self) {
        let _ = self.localstack.rm().await;
        let _ = self.redis.rm().await;
        let _ = self.pg.rm().await;
    }
}
