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
mod screenshot;
mod up;

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
    /// Skip the SQS calibration (about 2 s) that `run` makes first (see `doctor --calibrate`).
    /// Every command accepts it; only `run` calibrates.
    #[arg(long, global = true)]
    no_calibrate: bool,
}

impl ServiceArgs {
    fn options(&self) -> ServiceOptions {
        ServiceOptions { force: self.services, allow_remote: self.allow_remote, no_calibrate: self.no_calibrate }
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
    Screenshot(screenshot::ScreenshotArgs),
    /// Measure exploration throughput on the real services and where a schedule's time goes.
    Bench(bench::BenchArgs),
    /// Write a workload declared in a file, for a team's own service in any language: a
    /// commented `scenarios/<name>.workload.toml`, a schema, a scripted scenario and an
    /// exploration, for the team to edit.
    Init(InitArgs),
}

/// `crashpoint init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// The directory to write into (the team's repository; created if missing). Files that
    /// exist already are left alone, and the command fails naming them.
    pub dir: std::path::PathBuf,
    /// The workload's name (default: the directory's name, in lower case).
    #[arg(long)]
    pub name: Option<String>,
    /// Also declare an HTTP API the worker calls, named this (lower-case letters, e.g.
    /// `cards`): a `[[providers]]` stanza with a charge and a lookup to edit.
    #[arg(long)]
    pub provider: Option<String>,
}

/// The whole `crashpoint` command for the workloads in `registry` (the first is the default
/// for scenario files that name none): parses the process's arguments, runs the command and
/// returns the process exit code (0 pass, 1 violation, 2 harness error, 128+signal). A team's
/// own binary is `fn main() { std::process::exit(crashpoint::main(registry)) }`, or
/// [`crate::main!`].
pub fn main(registry: Registry) -> i32 {
    main_with(registry, &NoFiles)
}

/// Workloads declared in files, which a binary adds to its compiled ones at run time
/// ([`main_with`]): `crashpoint_declared::Files` reads the `*.workload.toml` files under the
/// scenarios directory.
pub trait Declarations {
    /// The workloads declared under `scenarios` (the scenarios directory). Errors: a file
    /// that does not read, named with its line and field.
    fn discover(&self, scenarios: &std::path::Path) -> anyhow::Result<Vec<std::sync::Arc<dyn crate::workload::Workload>>>;
    /// Writes a new declared workload named `name` into `dir` (`crashpoint init`), with a
    /// provider named `provider` when set, and returns the files written. Errors: a file that
    /// exists already, an invalid name, I/O.
    fn init(&self, dir: &std::path::Path, name: &str, provider: Option<&str>) -> anyhow::Result<Vec<std::path::PathBuf>>;
}

/// No workload files: the binary knows only its compiled workloads.
struct NoFiles;

impl Declarations for NoFiles {
    fn discover(&self, _: &std::path::Path) -> anyhow::Result<Vec<std::sync::Arc<dyn crate::workload::Workload>>> {
        Ok(Vec::new())
    }
    fn init(&self, _: &std::path::Path, _: &str, _: Option<&str>) -> anyhow::Result<Vec<std::path::PathBuf>> {
        anyhow::bail!("this binary reads no workload files; the stock `crashpoint` binary does")
    }
}

/// Like [`main`], and the commands that read scenarios (`run`, `repro`, `list`, `catalogue`,
/// `bench`) also know the workloads `declared` finds in the scenarios directory
/// (`crate::scenario::scenarios_dir`), after those of `registry`; `init` writes a new one.
/// A malformed workload file ends those commands with exit 2 and its message.
pub fn main_with(registry: Registry, declared: &dyn Declarations) -> i32 {
    let cli = Cli::parse();
    init_tracing();
    // Ctrl-C and SIGTERM stop every process this run started, a team's worker processes too,
    // whoever started the services.
    crate::services::native::process::install_signal_cleanup();
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("crashpoint: cannot start the tokio runtime: {e}");
            return EXIT_HARNESS;
        }
    };
    let opts = cli.services.options();
    let reads_scenarios = matches!(cli.command, Command::List | Command::Catalogue(_) | Command::Run(_) | Command::Repro(_) | Command::Bench(_));
    let registry = match reads_scenarios {
        true => match declared.discover(&crate::scenario::scenarios_dir()).and_then(|more| registry.with(more)) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("crashpoint: error: {e:#}");
                return EXIT_HARNESS;
            }
        },
        false => registry,
    };
    // A panic here (a write to a closed pipe, `crashpoint run … | head`) unwinds past the
    // pools that keep worker processes between schedules: every process the run started is
    // stopped before the panic goes on, as on Ctrl-C.
    let command = std::panic::AssertUnwindSafe(|| match cli.command {
        Command::Doctor(args) => rt.block_on(doctor::doctor(&opts, &args)),
        Command::Up => rt.block_on(up::up()),
        Command::Down => up::down(),
        Command::List => list::list(&registry),
        Command::Catalogue(args) => catalogue::catalogue(&rt, &opts, &args, &registry),
        Command::Run(args) => run::run(&rt, &opts, &args, &registry),
        Command::Repro(args) => run::repro(&rt, &opts, &args, &registry),
        Command::Screenshot(args) => screenshot::screenshot(&args),
        Command::Bench(args) => bench::bench(&rt, &opts, &args, &registry),
        Command::Init(args) => init(declared, &args),
    });
    let result = match std::panic::catch_unwind(command) {
        Ok(r) => r,
        Err(panic) => {
            crate::services::native::process::cleanup_all();
            std::panic::resume_unwind(panic);
        }
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

/// `crashpoint init DIR`: writes the files and says what to do next.
fn init(declared: &dyn Declarations, args: &InitArgs) -> anyhow::Result<i32> {
    let name = match &args.name {
        Some(n) => n.clone(),
        None => {
            let abs = std::path::absolute(&args.dir)?;
            let base = abs.file_name().and_then(|n| n.to_str()).unwrap_or("service").to_ascii_lowercase();
            base.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect::<String>().trim_matches('-').to_string()
        }
    };
    let written = declared.init(&args.dir, &name, args.provider.as_deref())?;
    for f in &written {
        println!("wrote {}", f.display());
    }
    println!(
        "next: point `command` in scenarios/{name}.workload.toml at your worker, then run `crashpoint list` and \
         `crashpoint run {name}` in {}",
        args.dir.display()
    );
    Ok(EXIT_OK)
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn,sqlx::postgres::notice=error"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).try_init();
}


/// A team's `main`: `crashpoint::main!(MyWorkload, OtherWorkload);` registers the workloads
/// (the first is the default) and runs the whole CLI (list, run, repro, catalogue, bench,
/// reports), exiting with its code, in the manner of `criterion_main!`.
#[macro_export]
macro_rules! main {
    ($($workload:expr),+ $(,)?) => {
        fn main() {
            let registry = $crate::Registry::new(vec![$(std::sync::Arc::new($workload)),+]);
            std::process::exit($crate::main(registry));
        }
    };
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Cli;

    /// Every command's `--help` renders and lists the service flags (`--no-calibrate`,
    /// `--services`, `--allow-remote`), and every command accepts `--no-calibrate`.
    #[test]
    fn every_command_takes_the_service_flags() {
        let names: Vec<String> = Cli::command().get_subcommands().map(|c| c.get_name().to_string()).collect();
        assert!(names.len() >= 10, "the commands: {names:?}");
        for name in &names {
            let help = Cli::try_parse_from(["crashpoint", name, "--help"]).expect_err("--help ends the parse");
            assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp, "{name} --help");
            let text = help.to_string();
            for flag in ["--no-calibrate", "--services", "--allow-remote"] {
                assert!(text.contains(flag), "`crashpoint {name} --help` lists no {flag}:\n{text}");
            }
        }
        for args in [&["catalogue", "--no-calibrate"][..], &["repro", "payout/explore", "--no-calibrate"], &["bench", "--no-calibrate"], &["run", "--no-calibrate"]] {
            let parsed = Cli::try_parse_from(std::iter::once("crashpoint").chain(args.iter().copied()));
            assert!(parsed.as_ref().is_ok_and(|c| c.services.no_calibrate), "crashpoint {args:?}: {:?}", parsed.err());
        }
    }
}
