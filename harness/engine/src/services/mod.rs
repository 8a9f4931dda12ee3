//! Provisioning of the real services: PostgreSQL, SQS (LocalStack) and Redis.
//!
//! One [`Services`] handle owns whatever a provider started and gives [`ServiceClients`]:
//! a `sqlx::PgPool`, an `aws_sdk_sqs::Client` and a Redis connection. Three providers exist,
//! chosen in this order unless one is forced ([`choose`]):
//! 1. [`ProviderKind::External`]: `DATABASE_URL`, `SQS_ENDPOINT_URL` and `REDIS_URL` are all set;
//! 2. [`ProviderKind::Containers`]: a Docker engine answers, so testcontainers starts them;
//! 3. [`ProviderKind::Native`]: throwaway local processes on free loopback ports.
//!
//! Everything a provider started is stopped when the handle is dropped, and on SIGINT/SIGTERM
//! through [`native::process`]'s registry.

pub mod calibrate;
pub mod clients;
#[cfg(feature = "containers")]
pub mod containers;
pub mod cpu;
pub mod docker;
pub mod external;
pub mod native;
pub mod ports;
pub mod redact;
pub mod sqs_calls;
pub mod safety;

use std::fmt;

use anyhow::Result;

pub use clients::ServiceClients;

/// Which provider supplies the services.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Processes started by the harness from local binaries (PostgreSQL, redis-server, LocalStack).
    Native,
    /// Containers started through testcontainers; needs a reachable Docker engine.
    Containers,
    /// Services named by `DATABASE_URL`, `SQS_ENDPOINT_URL` and `REDIS_URL`.
    External,
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProviderKind::Native => "native",
            ProviderKind::Containers => "containers",
            ProviderKind::External => "external",
        })
    }
}

/// Where the three services listen. URLs may carry passwords: print them with `redact::url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// A `postgres://` URL.
    pub database_url: String,
    /// The SQS endpoint, e.g. `http://127.0.0.1:4566`.
    pub sqs_endpoint_url: String,
    /// Further SQS endpoints: other LocalStack instances beside `sqs_endpoint_url`, empty for
    /// one. A schedule's namespace keeps its queues on one of them, the one with the fewest
    /// live namespaces when it is created (the namespace pool, `namespace/pool.rs`, hands the
    /// namespace [`Endpoints::on_sqs_shard`]), so that the slots' SQS calls spread over several
    /// LocalStack processes instead of queueing for one (LocalStack serves SQS from one Python
    /// process: its CPU per call was measured as the exploration's ceiling).
    pub sqs_shards: Vec<String>,
    /// A `redis://` URL.
    pub redis_url: String,
}

impl Endpoints {
    /// Every SQS endpoint: `sqs_endpoint_url`, then `sqs_shards`.
    pub fn sqs_endpoints(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.sqs_endpoint_url.as_str()).chain(self.sqs_shards.iter().map(String::as_str))
    }

    /// These endpoints as one namespace sees them: SQS at the `n`-th of
    /// [`Endpoints::sqs_endpoints`] (counted modulo their number), and no further shard.
    pub fn on_sqs_shard(&self, n: usize) -> Endpoints {
        let url = self.sqs_endpoints().nth(n % (1 + self.sqs_shards.len())).unwrap_or_default().to_string();
        Endpoints { sqs_endpoint_url: url, sqs_shards: Vec::new(), ..self.clone() }
    }

    /// Every service URL with its service's name: `("PostgreSQL", database_url)`, `("SQS", url)`
    /// for each of [`Endpoints::sqs_endpoints`], then `("Redis", redis_url)`.
    pub fn urls(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let sqs = self.sqs_endpoints().map(|u| ("SQS", u));
        std::iter::once(("PostgreSQL", self.database_url.as_str())).chain(sqs).chain([("Redis", self.redis_url.as_str())])
    }

    /// The services that accept no TCP connection on any address their host resolves to, as
    /// `PostgreSQL at 127.0.0.1:5432`, in the order of [`Endpoints::urls`] (URLs redacted). An
    /// address is tried twice, 1 s (1000 ms) each, when the first try times out (a dropped SYN
    /// is retransmitted only after 1 s on Linux); a refused connection is an answer. A host
    /// that does not resolve is not counted as down. Used after a run failed, to name a
    /// service that died under it, and after a schedule broke an invariant, whose verdict is
    /// then a services error instead (`scenario/run.rs`): so it must not call a live service
    /// down.
    pub fn unreachable(&self) -> Vec<String> {
        use std::net::{TcpStream, ToSocketAddrs};
        let answers = |a: &std::net::SocketAddr| {
            for _ in 0..2 {
                match TcpStream::connect_timeout(a, std::time::Duration::from_millis(1000)) {
                    Ok(_) => return true,
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
                    Err(_) => return false,
                }
            }
            false
        };
        self.urls()
            .filter_map(|(name, url)| {
                let u = url::Url::parse(url).ok()?;
                let default_port = match u.scheme() {
                    "postgres" | "postgresql" => Some(5432),
                    "redis" => Some(6379),
                    _ => u.port_or_known_default(),
                };
                let addr = format!("{}:{}", u.host_str()?, u.port().or(default_port)?);
                let mut resolved = addr.to_socket_addrs().ok()?.peekable();
                resolved.peek()?;
                (!resolved.any(|a| answers(&a))).then(|| format!("{name} at {addr}"))
            })
            .collect()
    }
}


/// Options shared by every command that needs services.
#[derive(Debug, Clone, Default)]
pub struct ServiceOptions {
    /// Force a provider instead of choosing one automatically.
    pub force: Option<ProviderKind>,
    /// Allow the destructive parts of a run (CREATE/DROP SCHEMA, DeleteQueue, DEL of the run's
    /// keys) on non-loopback hosts.
    pub allow_remote: bool,
    /// Skip the SQS calibration that `run` makes first (`--no-calibrate`).
    pub no_calibrate: bool,
}

/// The provider that will be used, and why.
#[derive(Debug, Clone)]
pub struct Choice {
    /// The chosen provider.
    pub kind: ProviderKind,
    /// One sentence saying why, for `doctor` and logs.
    pub reason: String,
}

/// Chooses the provider: forced, else external when all three env vars are set, else
/// containers when a Docker engine answers, else native.
pub fn choose(force: Option<ProviderKind>) -> Choice {
    if let Some(kind) = force {
        return Choice { kind, reason: format!("forced with --services {kind}") };
    }
    if let Some(endpoints) = external::from_env() {
        let _ = endpoints;
        return Choice {
            kind: ProviderKind::External,
            reason: "DATABASE_URL, SQS_ENDPOINT_URL and REDIS_URL are all set".into(),
        };
    }
    match docker::engine_status() {
        Ok(where_) if cfg!(feature = "containers") => Choice {
            kind: ProviderKind::Containers,
            reason: format!("a Docker engine answers at {where_}"),
        },
        Ok(where_) => Choice {
            kind: ProviderKind::Native,
            reason: format!(
                "a Docker engine answers at {where_}, but this build has no `containers` feature"
            ),
        },
        Err(why) => Choice {
            kind: ProviderKind::Native,
            reason: format!("the external env vars are not all set and {why}"),
        },
    }
}

/// Running services and the guard that stops what the provider started.
pub struct Services {
    /// Where they listen.
    pub endpoints: Endpoints,
    /// Whether destructive resets may touch these hosts (loopback, or `--allow-remote`).
    pub allow_remote: bool,
    guard: Guard,
}

enum Guard {
    None,
    Native(Box<native::NativeServices>),
    #[cfg(feature = "containers")]
    Containers(Box<containers::ContainerServices>),
}

impl Services {
    /// Starts (or attaches to) the services with the chosen provider and waits until each one
    /// answers. Errors: a missing binary ([`crate::error::MissingBinary`]), a service that did
    /// not become ready in time, an unreachable external endpoint.
    pub async fn start(opts: &ServiceOptions) -> Result<Services> {
        let choice = choose(opts.force);
        tracing::info!(provider = %choice.kind, reason = %choice.reason, "choosing services");
        let (endpoints, guard) = match choice.kind {
            ProviderKind::External => (external::require_env()?, Guard::None),
            ProviderKind::Native => {
                let native = native::NativeServices::start().await?;
                (native.endpoints.clone(), Guard::Native(Box::new(native)))
            }
            ProviderKind::Containers => start_containers().await?,
        };
        Ok(Services {
            endpoints,
            allow_remote: opts.allow_remote,
            guard,
        })
    }

    /// Connects one client to each service. See [`ServiceClients::connect`].
    pub async fn connect(&self) -> Result<ServiceClients> {
        ServiceClients::connect(&self.endpoints).await
    }

    /// Refuses destructive operations on a non-loopback host unless `--allow-remote` was given.
    pub fn check_destructive(&self, what: &str) -> Result<()> {
        safety::check_destructive(&self.endpoints, self.allow_remote, what)
    }

    /// Stops what the provider started and removes its temporary directories.
    pub async fn stop(self) {
        match self.guard {
            Guard::None => {}
            Guard::Native(native) => (*native).stop(),
            #[cfg(feature = "containers")]
            Guard::Containers(c) => c.stop().await,
        }
    }
}

#[cfg(feature = "containers")]
async fn start_containers() -> Result<(Endpoints, Guard)> {
    let c = containers::ContainerServices::start().await?;
    Ok((c.endpoints.clone(), Guard::Containers(Box::new(c))))
}

#[cfg(not(feature = "containers"))]
async fn start_containers() -> Result<(Endpoints, Guard)> {
    anyhow::bail!("this build has no `containers` feature; rebuild with `--features containers`")
}
