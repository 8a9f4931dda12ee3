//! The `crashpoint` command line (clap).
//!
//! Exit codes: 0 ok, 1 an invariant violated, 2 a harness or services error
//! (see [`crate::error`]).

mod bench;
mod catalogue;
mod doctor;
mod list;
mod print;
mod progress;
mod run;
mod shot;
mod updown;

use clap::{Args, Parser, Subcommand};

use crate::error::{EXIT_HARNESS, EXIT_OK};
use crate::services::{ProviderKind, ServiceOptions};
use crate::workload::Registry;

/// Deterministic failure injection for at-least-once message handlers on real PostgreSQL,
/// SQS (LocalStack) and Redis.
#[derive(Debug, Parser)]
#[command(name = "crashpoint", version, about)]
pub struct Cli {
    #[command(flatten)]
    services: ServiceArgs,
    #[command(subcommand)]
    command: Command,
}

/// How services are provided.
#[derive(Debug, Args, Clone)]
pub struct ServiceArgs {
    /// Force a provider instead of choosing external → containers → native.
    #[arg(long, global = true, value_enum)]
    services: Option<ProviderKind>,
    /// Allow the destructive parts of a run (CREATE/DROP SCHEMA, DeleteQueue, DEL of the run's
    /// keys) on non-loopback hosts.
    #[arg(long, global = true)]
    allow_remote: bool,
}

impl ServiceArgs {
    fn options(&self) -> ServiceOptions {
        ServiceOptions { force: self.services, allow_remote: self.allow_remote }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Which provider would be chosen and why, which binaries were found, and a timed round
    /// trip to each service; with `--calibrate`, also how the SQS endpoint compares with AWS.
    Doctor(doctor::DoctorArgs),
    /// Start the native services and keep them running; prints the env lines that make later
    /// runs use them as the external provider.
    Up,
    /// Stop the services that `up` started.
    Down,
    /// Run scenarios (all but the exhaustive ones by default): scripted ones once, exploration
    /// ones within a budget, exhaustive ones completely (`--exhaustive`).
    Run(run::RunArgs),
    /// Run one schedule of a scenario, given as text or regenerated from a case seed.
    Repro(run::ReproArgs),
    /// List the scenarios, and each workload's roles, crash points, faults and systems.
    List,
    /// Explore every mutant of a workload (of every workload by default), then its reference,
    /// under one budget; print the detection table.
    Catalogue(catalogue::CatalogueArgs),
    /// Take a PNG of a report page (a timeline) with headless Chromium.
    Screenshot(shot::ScreenshotArgs),
    /// Measure exploration throughput on the real services and where a schedule's time goes.
    Bench(bench::BenchArgs),
}

/// The whole `crashpoint` command for the workloads in `registry` (the first is the default
/// for scenario files that name none): parses the process's arguments, runs the command and
/// returns the process exit code (0 pass, 1 violation, 2 harness error, 128+signal). A team's
/// own binary is `fn main() { std::process::exit(crashpoint::cli::main(registry)) }`, or
/// [`crate::main!`].
pub fn main(registry: Registry) -> i32 {
    let cli = Cli::parse();
    init_tracing();
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("crashpoint: cannot start the tokio runtime: {e}");
            return EXIT_HARNESS;
        }
    };
    let opts = cli.services.options();
    let result = match cli.command {
        Command::Doctor(args) => rt.block_on(doctor::doctor(&opts, &args)),
        Command::Up => rt.block_on(updown::up()),
        Command::Down => updown::down(),
        Command::List => list::list(&registry),
        Command::Catalogue(args) => catalogue::catalogue(&rt, &opts, &args, &registry),
        Command::Run(args) => run::run(&rt, &opts, &args, &registry),
        Command::Repro(args) => run::repro(&rt, &opts, &args, &registry),
        Command::Screenshot(args) => shot::screenshot(&args),
        Command::Bench(args) => bench::bench(&rt, &opts, &args, &registry),
    };
    drop(rt);
    crate::sim::wire::process::remove_logs_dir();
    if let Some(sig) = crate::services::native::process::interrupted() {
        // The signal thread stopped the services; the reports (if any) are written.
        return 128 + sig;
    }
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("crashpoint: error: {e:#}");
            EXIT_HARNESS
        }
    }
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn,sqlx::postgres::notice=error"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).try_init();
}

#[allow(dead_code)]
const _: i32 = EXIT_OK;

/// A team's `main`: `crashpoint::main!(MyWorkload, OtherWorkload);` registers the workloads
/// (the first is the default) and runs the whole CLI (list, run, repro, catalogue, bench,
/// reports), exiting with its code, in the manner of `criterion_main!`.
#[macro_export]
macro_rules! main {
    ($($workload:expr),+ $(,)?) => {
        fn main() {
            let registry = $crate::workload::Registry::new(vec![$(std::sync::Arc::new($workload)),+]);
            std::process::exit($crate::cli::main(registry));
        }
    };
}
