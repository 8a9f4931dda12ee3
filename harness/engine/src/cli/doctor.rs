//! `crashpoint doctor [--calibrate]`.

use anyhow::Result;

use crate::error::EXIT_OK;
use crate::services::native::{binaries, localstack};
use crate::services::{calibrate, choose, redact, ProviderKind, ServiceOptions, Services};

/// Options of `crashpoint doctor`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DoctorArgs {
    /// After the round trips, probe the SQS endpoint against AWS's documented semantics (stale
    /// receipt handles, visibility changes, receive counts, FIFO deduplication, redrive, long
    /// polling) and print how it compares, with the documentation each row comes from. Creates
    /// and deletes queues named `crashpoint-calibrate-*`; takes about 2 s. Mismatches do not
    /// change the exit code.
    #[arg(long)]
    pub calibrate: bool,
}

/// Prints the provider choice and why, the binaries found, then starts the services and
/// times one round trip to each; with `--calibrate`, then prints the SQS calibration table
/// ([`calibrate::calibrate`]). Errors (exit 2): a missing binary, a service not answering, an
/// SQS endpoint unreachable for the calibration, or calibrating a non-loopback endpoint without
/// `--allow-remote` (it creates and deletes queues). Exit 0 otherwise, mismatches included.
pub async fn doctor(opts: &ServiceOptions, args: &DoctorArgs) -> Result<i32> {
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
                "  {:<13} venv not complete yet (LocalStack and its service catalog); it will be completed at {}",
                "localstack",
                localstack::venv_dir().display()
            ),
        }
    }
    let services = Services::start(opts).await?;
    let result = async {
        if args.calibrate {
            // Before any connection: a remote endpoint is refused, not probed.
            services.check_destructive("creating and deleting calibration queues")?;
        }
        let clients = services.connect().await?;
        let lat = clients.ping().await?;
        let e = &services.endpoints;
        println!("services (round trip, median of 5):");
        println!("  postgres  {:>7} µs  {}", lat.postgres_us, redact::url(&e.database_url));
        println!("  sqs       {:>7} µs  {}", lat.sqs_us, redact::url(&e.sqs_endpoint_url));
        // Further LocalStack instances ([`Endpoints::sqs_shards`]): reachable, not timed.
        for shard in &e.sqs_shards {
            println!("  sqs       {:>10}  {}", "(shard)", redact::url(shard));
        }
        println!("  redis     {:>7} µs  {}", lat.redis_us, redact::url(&e.redis_url));
        let down = e.unreachable();
        if !down.is_empty() {
            anyhow::bail!("not accepting connections: {}", down.join(", "));
        }
        println!("all three services reachable");
        if args.calibrate {
            let cal = calibrate::calibrate(&clients.sqs, &redact::url(&e.sqs_endpoint_url)).await?;
            print!("{}", cal.table());
        }
        clients.pg.close().await;
        anyhow::Ok(())
    }
    .await;
    services.stop().await;
    result.map(|_| EXIT_OK)
}
