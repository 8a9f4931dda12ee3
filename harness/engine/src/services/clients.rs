//! Clients for the three services, configured for the simulation.
//!
//! The SQS client has the SDK's timeouts, retries and stalled-stream protection switched off:
//! inside a turmoil host tokio's clock races ahead during real I/O (GUIDE.md §5), so any SDK
//! timer would fire spuriously. The scheduler's logical clock decides every expiry instead.
//!
//! Its HTTP connection pool drops a connection idle for [`SQS_POOL_IDLE`], below the server's
//! own idle timeout. Otherwise a client reuses a keep-alive connection that the server is
//! closing at that moment, and the call fails with hyper's `IncompleteMessage` ("connection
//! closed before message completed"). That happened to an admin client that sat in the
//! namespace pool for more than a minute: hyper keeps idle connections 90 s by default, and
//! LocalStack's gateway closes them after 60 s (measured: a keep-alive socket closed by the
//! server 59.5 s after its last reply).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use aws_sdk_sqs::config::{
    retry::RetryConfig, StalledStreamProtectionConfig,
    timeout::TimeoutConfig, BehaviorVersion, Credentials, Region,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};

use super::{redact, Endpoints};

/// How long the SQS client keeps an idle keep-alive connection for reuse: 20 s, well below
/// the 60 s after which LocalStack's gateway closes an idle connection (see the module doc).
pub const SQS_POOL_IDLE: Duration = Duration::from_secs(20);

/// The AWS region used against emulators when `AWS_REGION` is not set.
pub const DEFAULT_REGION: &str = "us-east-1";

/// One client per service.
#[derive(Clone)]
pub struct ServiceClients {
    /// A small PostgreSQL pool (at most 4 connections).
    pub pg: PgPool,
    /// An SQS client pointed at the endpoint.
    pub sqs: aws_sdk_sqs::Client,
    /// A multiplexed Redis connection.
    pub redis: redis::aio::MultiplexedConnection,
}

impl ServiceClients {
    /// Connects to all three. Errors name the service and its redacted URL.
    pub async fn connect(endpoints: &Endpoints) -> Result<ServiceClients> {
        let pg = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(pg_options(&endpoints.database_url)?)
            .await
            .with_context(|| {
                format!("connecting to PostgreSQL at {}", redact::url(&endpoints.database_url))
            })?;
        let sqs = sqs_client(&endpoints.sqs_endpoint_url);
        let redis = redis_connect(&endpoints.redis_url).await?;
        Ok(ServiceClients { pg, sqs, redis })
    }
}

/// Connection options for `url`, with statement logging off (the trace is ours).
pub fn pg_options(url: &str) -> Result<PgConnectOptions> {
    let opts: PgConnectOptions = url
        .parse()
        .with_context(|| format!("DATABASE_URL {} is not a PostgreSQL URL", redact::url(url)))?;
    Ok(opts.disable_statement_logging())
}

/// An SQS client for `endpoint`. Region comes from `AWS_REGION` (default `us-east-1`) and
/// credentials from `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` (default `test`/`test`, the
/// emulators' convention). SDK timeouts, retries and stalled-stream protection are disabled.
pub fn sqs_client(endpoint: &str) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::from_conf(sqs_config(endpoint, http_client(endpoint)).build())
}

/// Like [`sqs_client`], and every call it makes is counted in `calls` by operation.
pub fn sqs_client_counted(endpoint: &str, calls: &super::sqs_calls::SqsCalls) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::from_conf(sqs_config(endpoint, http_client(endpoint)).interceptor(calls.interceptor()).build())
}

/// Like [`sqs_client_counted`], with one HTTP connection pool per endpoint for the whole
/// process, so that keep-alive connections outlive the worker host that opened them and serve
/// the next schedule's workers: LocalStack accepts a new TCP connection per worker and
/// schedule otherwise. Only for clients whose every call runs on the I/O runtime
/// ([`crate::sim::io::on_io`]): the pool's connections are tasks of the runtime that opened
/// them, which must outlive every user of the pool.
pub fn sqs_worker_client(endpoint: &str, calls: &super::sqs_calls::SqsCalls) -> aws_sdk_sqs::Client {
    use std::collections::BTreeMap;
    use std::sync::{Mutex, OnceLock};
    type Pools = Mutex<BTreeMap<String, aws_smithy_runtime_api::client::http::SharedHttpClient>>;
    static POOLS: OnceLock<Pools> = OnceLock::new();
    let http = POOLS
        .get_or_init(Pools::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(endpoint.to_string())
        .or_insert_with(|| http_client(endpoint))
        .clone();
    aws_sdk_sqs::Client::from_conf(sqs_config(endpoint, http).interceptor(calls.interceptor()).build())
}

fn sqs_config(endpoint: &str, http: aws_smithy_runtime_api::client::http::SharedHttpClient) -> aws_sdk_sqs::config::Builder {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let creds = Credentials::new(
        env("AWS_ACCESS_KEY_ID", "test"),
        env("AWS_SECRET_ACCESS_KEY", "test"),
        None,
        None,
        "crashpoint",
    );
    aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(env("AWS_REGION", DEFAULT_REGION)))
        .credentials_provider(creds)
        .endpoint_url(endpoint)
        .http_client(http)
        .retry_config(RetryConfig::disabled())
        .timeout_config(TimeoutConfig::disabled())
        .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
}

/// The SDK's client with [`SQS_POOL_IDLE`]: plain HTTP for an `http://` endpoint (LocalStack,
/// an emulator), else HTTPS with rustls and aws-lc. An HTTPS-capable one loads and parses the
/// platform's root certificates when it is built (about 2 % of the harness's CPU in `perf`,
/// when every worker host built its own), which a plain endpoint never uses.
fn http_client(endpoint: &str) -> aws_smithy_runtime_api::client::http::SharedHttpClient {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    let builder = aws_smithy_http_client::Builder::new().pool_idle_timeout(SQS_POOL_IDLE);
    if endpoint.get(..7).is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://")) {
        return builder.build_http();
    }
    builder.tls_provider(Provider::Rustls(CryptoMode::AwsLc)).build_https()
}

/// A multiplexed Redis connection to `url`, without redis-rs's own timeouts (500 ms per
/// response, 1 s to connect). Worker hosts run on turmoil's clock, which races ahead while
/// real I/O is pending (GUIDE.md §5), so those timeouts fired on replies that arrived: a lock
/// taken was reported as an error. The harness's step timeout covers a Redis that hangs.
pub async fn redis_connect(url: &str) -> Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(url)
        .with_context(|| format!("REDIS_URL {} is not a Redis URL", redact::url(url)))?;
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None).set_connection_timeout(None);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .with_context(|| format!("connecting to Redis at {}", redact::url(url)))
}

/// Round-trip latencies measured by [`ServiceClients::ping`], in microseconds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Latencies {
    /// `SELECT 1` on PostgreSQL, µs.
    pub postgres_us: u128,
    /// `ListQueues` on SQS, µs.
    pub sqs_us: u128,
    /// `PING` on Redis, µs.
    pub redis_us: u128,
}

impl ServiceClients {
    /// One round trip to each service, timed (median of 5 after one warm-up, in µs).
    pub async fn ping(&self) -> Result<Latencies> {
        let mut redis = self.redis.clone();
        let postgres_us = median_us(|| async {
            sqlx::query("SELECT 1").execute(&self.pg).await.context("PostgreSQL SELECT 1")?;
            Ok(())
        })
        .await?;
        let sqs_us = median_us(|| async {
            self.sqs.list_queues().send().await.context("SQS ListQueues")?;
            Ok(())
        })
        .await?;
        let redis_us = median_us(|| {
            let mut c = redis.clone();
            async move {
                let _: String = redis::cmd("PING").query_async(&mut c).await.context("Redis PING")?;
                Ok(())
            }
        })
        .await?;
        let _: String = redis::cmd("PING").query_async(&mut redis).await?;
        Ok(Latencies { postgres_us, sqs_us, redis_us })
    }
}

async fn median_us<F, Fut>(mut f: F) -> Result<u128>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    f().await?;
    let mut samples = Vec::with_capacity(5);
    for _ in 0..5 {
        let t = Instant::now();
        f().await?;
        samples.push(t.elapsed().as_micros());
    }
    samples.sort_unstable();
    Ok(samples[samples.len() / 2])
}

/// The runtime that owns the workers' sockets: one thread for all slots, living as long as
/// the process. A socket registered with a turmoil host's runtime dies with it when the
/// schedule ends; one registered here can outlive its host (a kept PostgreSQL connection,
/// [`super::worker_pg`]).
pub fn io_runtime() -> &'static tokio::runtime::Runtime {
    static IO: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    IO.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("crashpoint-io")
            .enable_all()
            .build()
            .expect("starting the runtime of the workers' connections")
    })
}
