//! `crashpoint doctor`.

use anyhow::Result;

use crate::error::EXIT_OK;
use crate::services::native::{binaries, localstack};
use crate::services::{choose, redact, ProviderKind, ServiceOptions, Services};

/// Prints the provider choice and why, the binaries found, then starts the services and
/// times one round trip to each. Errors (exit 2): a missing binary, a service not answering.
pub async fn doctor(opts: &ServiceOptions) -> Result<i32> {
    let choice = choose(opts.force);
    println!("provider: {} ({})", choice.kind, choice.reason);
    if choice.kind == ProviderKind::Native {
        println!("binaries:");
        let show = |name: &str, r: Result<std::path::PathBuf, crate::error::MissingBinary>| match r {
            Ok(p) => println!("  {name:<13} {}", p.display()),
            Err(e) => println!("  {name:<13} MISSING: {e}"),
        };
        show("postgres", binaries::postgres_bindir());
        show("redis-server", binaries::redis_server());
        show("python3", binaries::python3());
        match localstack::installed_python() {
            Some(p) => println!("  {:<13} {} (venv ready)", "localstack", p.display()),
            None => println!(
                "  {:<13} venv not installed yet; it will be created at {}",
                "localstack",
                localstack::venv_dir().display()
            ),
        }
    }
    let services = Services::start(opts).await?;
    let result = async {
        let clients = services.connect().await?;
        let lat = clients.ping().await?;
        let e = &services.endpoints;
        println!("services (round trip, median of 5):");
        println!("  postgres  {:>7} µs  {}", lat.postgres_us, redact::url(&e.database_url));
        println!("  sqs       {:>7} µs  {}", lat.sqs_us, redact::url(&e.sqs_endpoint_url));
        println!("  redis     {:>7} µs  {}", lat.redis_us, redact::url(&e.redis_url));
        println!("all three services reachable");
        clients.pg.close().await;
        anyhow::Ok(())
    }
    .await;
    services.stop().await;
    result.map(|_| EXIT_OK)
}
