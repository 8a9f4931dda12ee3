//! LocalStack (SQS only) in host mode, from a Python venv the harness creates once and reuses.
//!
//! Pins live in `fixtures/localstack-constraints.txt` (GUIDE.md §5: `localstack-core==4.13.1`
//! works on Python 3.11 with cbor2 5.6.5, cryptography 43.0.3, pyopenssl 24.2.1 and
//! service-identity). The venv sits under `~/.cache/crashpoint/localstack-4.13.1/`, or
//! `$CRASHPOINT_CACHE_DIR/localstack-4.13.1/`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use nix::sys::signal::Signal;

use super::binaries;
use super::process::ManagedChild;
use crate::services::ports::on_free_port;

/// The pinned LocalStack version.
pub const VERSION: &str = "4.13.1";

/// The constraints file, embedded so that an installed binary needs no checkout.
pub const CONSTRAINTS: &str = include_str!("../../../../../fixtures/localstack-constraints.txt");

/// A running LocalStack gateway.
pub struct LocalStack {
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
    /// The gateway process.
    pub child: ManagedChild,
}

/// crashpoint's cache directory: `$CRASHPOINT_CACHE_DIR`, else `~/.cache/crashpoint`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("CRASHPOINT_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| dirs::cache_dir().map(|d| d.join("crashpoint")))
        .unwrap_or_else(|| std::env::temp_dir().join("crashpoint-cache"))
}

/// The venv directory for the pinned version.
pub fn venv_dir() -> PathBuf {
    cache_dir().join(format!("localstack-{VERSION}"))
}

/// The venv's Python if the venv is complete: LocalStack installed (its marker file exists)
/// and its service catalog built ([`catalog_dir`]).
pub fn installed_python() -> Option<PathBuf> {
    let venv = venv_dir();
    (venv.join(".crashpoint-ready").exists() && catalog_dir().is_dir()).then(|| venv.join("bin/python"))
}

/// Where the venv keeps LocalStack's service catalog index, built once
/// (`service-catalog-<localstack>-<botocore>.dill`, about 0.9 MB). LocalStack builds it at the
/// first AWS request it serves, from every botocore service spec, into its cache directory
/// (`<FILESYSTEM_ROOT>/var/lib/localstack/cache/` in host mode), unless one is there
/// (`localstack.aws.spec.get_service_catalog`). A fresh `FILESYSTEM_ROOT` per instance made every
/// instance build it again: its first SQS call answered after 5.4 s and 7 s of CPU (measured).
/// [`attempt`] copies this one into each instance's cache directory instead, and
/// LocalStack loads it in about 0.5 s of CPU.
pub fn catalog_dir() -> PathBuf {
    venv_dir().join("service-catalog")
}

/// The `XDG_CACHE_HOME` of an instance whose `FILESYSTEM_ROOT` is `root` (of the catalog
/// build, under its temporary root): plux's entry-point cache goes in its `plux/`.
pub(super) fn xdg_cache_under(root: &Path) -> PathBuf {
    root.join("xdg-cache")
}

/// The `CONFIG_DIR` of an instance whose `FILESYSTEM_ROOT` is `root`: a directory that is
/// never created, so that no configuration profile (`<CONFIG_DIR>/default.env`, LocalStack's
/// `config.load_environment`) of the machine's user reaches the instance.
fn profiles_under(root: &Path) -> PathBuf {
    root.join("no-profiles")
}

/// LocalStack's cache directory under a host-mode `FILESYSTEM_ROOT` (its `config.Directories.for_host`).
fn cache_under(root: &Path) -> PathBuf {
    root.join("var/lib/localstack/cache")
}

/// Builds LocalStack's service catalog index into [`catalog_dir`] with the venv's `python`
/// (about 7 s of CPU) and loads it back, through a temporary directory renamed into place, so
/// that an interrupted or unreadable build leaves nothing that looks complete (LocalStack
/// would fall back to an index built in memory at every start, without a word at `LS_LOG=error`
/// beyond one log line). Errors: the build or the load failing, with its stderr; a file
/// operation failing, naming the path.
fn build_catalog(python: &Path) -> Result<()> {
    let (done, building) = (catalog_dir(), venv_dir().join("service-catalog.building"));
    let _ = std::fs::remove_dir_all(&building);
    let script = "import os\n\
        from localstack import config\n\
        from localstack.aws import spec\n\
        os.makedirs(config.dirs.cache, exist_ok=True)\n\
        path = os.path.join(config.dirs.cache, spec._get_catalog_filename())\n\
        spec.build_service_index_cache(path)\n\
        spec.load_service_index_cache(path)\n";
    run(
        Command::new(python)
            .args(["-c", script])
            .env("OVERRIDE_IN_DOCKER", "0")
            .env("FILESYSTEM_ROOT", &building)
            .env("CONFIG_DIR", profiles_under(&building))
            .env("XDG_CACHE_HOME", xdg_cache_under(&building)),
        "building LocalStack's service catalog index",
    )?;
    std::fs::rename(cache_under(&building), &done).with_context(|| format!("moving the service catalog to {}", done.display()))?;
    let _ = std::fs::remove_dir_all(&building);
    Ok(())
}

/// Copies the service catalog of [`catalog_dir`] into the cache directory of an instance
/// whose `FILESYSTEM_ROOT` is `root`. Errors: a file that cannot be read or written, naming it.
fn seed_catalog(root: &Path) -> Result<()> {
    let to = cache_under(root);
    std::fs::create_dir_all(&to).with_context(|| format!("creating {}", to.display()))?;
    let from = catalog_dir();
    for entry in std::fs::read_dir(&from).with_context(|| format!("reading {}", from.display()))? {
        let path = entry.with_context(|| format!("reading {}", from.display()))?.path();
        let name = path.file_name().expect("a directory entry has a name");
        std::fs::copy(&path, to.join(name)).with_context(|| format!("copying {} into {}", path.display(), to.display()))?;
    }
    Ok(())
}

/// Creates the venv, installs the pinned LocalStack into it and builds its service catalog
/// ([`catalog_dir`]), unless already done (about 40-50 s the first time, then about 8 s once for
/// a venv that lacks only the catalog). Errors: no `python3` (package `python3-venv`), pip
/// failing, the catalog build failing.
pub fn ensure_venv() -> Result<PathBuf> {
    if let Some(py) = installed_python() {
        return Ok(py);
    }
    let python = binaries::python3()?;
    let venv = venv_dir();
    // Several processes (parallel tests) may get here at once: one installs, the others wait.
    std::fs::create_dir_all(cache_dir())?;
    let lock_path = cache_dir().join(format!("localstack-{VERSION}.lock"));
    let lock_file = std::fs::File::create(&lock_path).with_context(|| format!("creating {}", lock_path.display()))?;
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow::anyhow!("locking {}: {e}", lock_path.display()))?;
    if let Some(py) = installed_python() {
        return Ok(py);
    }
    // A venv installed before the catalog was kept (marker, no catalog) only lacks the catalog.
    if !venv.join(".crashpoint-ready").exists() {
        let _ = std::fs::remove_dir_all(&venv);
        std::fs::create_dir_all(&venv).with_context(|| format!("creating {}", venv.display()))?;
        eprintln!("crashpoint: installing LocalStack {VERSION} into {} (once)", venv.display());
        run(Command::new(&python).args(["-m", "venv"]).arg(&venv), "python3 -m venv (apt-get install python3-venv)")?;
        let constraints = venv.join("constraints.txt");
        std::fs::write(&constraints, CONSTRAINTS)?;
        run(
            Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "--disable-pip-version-check", "-c"])
                .arg(&constraints)
                .arg(format!("localstack-core[runtime]=={VERSION}"))
                .arg("service-identity"),
            "pip install localstack-core",
        )?;
        std::fs::write(venv.join(".crashpoint-ready"), VERSION)?;
    }
    build_catalog(&venv.join("bin/python"))?;
    Ok(venv.join("bin/python"))
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!("{what} failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// The variable that sets how many LocalStack instances the native provider starts.
pub const INSTANCES_VAR: &str = "CRASHPOINT_LOCALSTACK_INSTANCES";
/// The most instances [`instances`] accepts.
pub const INSTANCES_MAX: usize = 4;

/// How many LocalStack instances to start: [`INSTANCES_VAR`] when set (1 to
/// [`INSTANCES_MAX`]), else 2 on a machine with at least 2 cores, else 1. LocalStack serves
/// SQS from one Python process, whose CPU per call was the exploration's ceiling;
/// with a second instance, each namespace keeping its queues on one
/// ([`crate::services::Endpoints::sqs_shards`]), `crashpoint bench` ran 8-25 % more schedules
/// per second on 2 cores (docs/performance.md, "Two LocalStack instances").
/// Errors: a value that is not a whole number in range, naming the variable.
pub fn instances() -> Result<usize> {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    match std::env::var(INSTANCES_VAR) {
        Err(_) => Ok(cores.min(2)),
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if (1..=INSTANCES_MAX).contains(&n) => Ok(n),
            _ => bail!("{INSTANCES_VAR}={v:?}: expected a whole number from 1 to {INSTANCES_MAX} (LocalStack instances to start)"),
        },
    }
}

/// Starts the gateway on a loopback port from `ports` ([`crate::services::ports::free_port`]; a
/// port taken before the gateway binds it is given up for the next one, [`on_free_port`]) with
/// only SQS, in host mode with its files under `dir` (in `fs-<port>/`, so that instances can
/// share `dir`) and the venv's service catalog copied in ([`catalog_dir`]), and waits until
/// `/_localstack/health` reports sqs `available` or `running` and a `ListQueues` answers (90 s,
/// plus the probe under way then, at most 5 s). Errors: the gateway exiting or not ready in
/// time, with the last reason and its log's end; its port taken (another port is tried).
pub async fn start(dir: &Path, ports: impl FnMut() -> Result<u16>) -> Result<LocalStack> {
    let python = tokio::task::spawn_blocking(ensure_venv).await??;
    on_free_port(ports, |port| attempt(&python, dir, port)).await
}

/// Settings that lower LocalStack's CPU per SQS call without changing any answer, for every
/// provider (these processes and the containers): its CPU per call is the ceiling of
/// exploration (docs/performance.md).
/// - `DISABLE_EVENTS`: no analytics events sent anywhere (`config.DISABLE_EVENTS`; the
///   machines have no network but the package registries).
/// - `SQS_DISABLE_CLOUDWATCH_METRICS` and `LS_LOG=error`: no CloudWatch metrics per call and no
///   request log printed (about 3.0 → 2.5 ms of CPU per call, measured here).
/// - `LOG_LEVEL_OVERRIDES`: `LS_LOG` sets the handler's level, not that of the request loggers
///   (`localstack.logging.setup.default_log_levels` keeps `localstack.request` at INFO), so
///   every call still built a log record that nothing printed: about 5 % of LocalStack's CPU
///   (py-spy `--gil` during a bench). With these levels it builds none.
pub const LEAN: &[(&str, &str)] = &[
    ("DISABLE_EVENTS", "1"),
    ("SQS_DISABLE_CLOUDWATCH_METRICS", "1"),
    ("LS_LOG", "error"),
    ("LOG_LEVEL_OVERRIDES", "localstack.request=ERROR,localstack.request.internal=ERROR"),
];

async fn attempt(python: &Path, dir: &Path, port: u16) -> Result<LocalStack> {
    let listen = format!("127.0.0.1:{port}");
    // Several instances may share `dir` (`instances`): each keeps its files apart.
    let root = dir.join(format!("fs-{port}"));
    seed_catalog(&root)?;
    let mut cmd = Command::new(python);
    cmd.args(["-m", "localstack.runtime.main"])
        .env("GATEWAY_LISTEN", &listen)
        .env("LOCALSTACK_HOST", &listen)
        .env("SERVICES", "sqs")
        .env("SQS_ENDPOINT_STRATEGY", "path")
        // Host mode even inside a container: LocalStack takes a machine with `/.dockerenv` for
        // its own image (`config.in_docker`), ignores FILESYSTEM_ROOT there and keeps its files in
        // /var/lib/localstack and /tmp/localstack, shared by every instance and left behind.
        .env("OVERRIDE_IN_DOCKER", "0")
        .env("FILESYSTEM_ROOT", &root)
        // plux (LocalStack's plugin loader) caches its entry-point index in
        // `$XDG_CACHE_HOME/plux/<hash>.entry_points.txt`, keyed by `sys.path`, whose first entry
        // is this process's working directory, new at every start. Two instances starting in
        // one directory wrote and read the same file at once (`write_text`, not atomic), and one
        // read it half written and exited with "No component plugins found in namespace
        // localstack.runtime.components" (CI); every start also left 25 kB in
        // ~/.cache/plux. Each instance keeps it under its own root.
        .env("XDG_CACHE_HOME", xdg_cache_under(&root))
        // LocalStack reads `$CONFIG_DIR/default.env` (default `~/.localstack/`) at import and
        // takes every variable in it that the environment lacks (`config.load_environment`):
        // a profile left on the machine (`PERSISTENCE=1`, another gateway) would change the
        // instance. This directory under the instance's root never exists.
        .env("CONFIG_DIR", profiles_under(&root))
        .env("DNS_ADDRESS", "0")
        .env("SKIP_SSL_CERT_DOWNLOAD", "1")
        .envs(LEAN.iter().copied())
        .current_dir(dir);
    let log = dir.join(format!("localstack-{port}.log"));
    let mut child = ManagedChild::spawn("localstack", cmd, &log, Signal::SIGTERM)?;
    let endpoint = format!("http://{listen}");
    let ready = async || match health_ok(port).await {
        true => list_queues(&endpoint).await,
        false => Err("/_localstack/health does not show sqs available yet".to_string()),
    };
    child.wait_ready(port, &log, (Duration::from_secs(90), Duration::from_millis(100)), "answered ListQueues", ready).await?;
    Ok(LocalStack { endpoint, child })
}

/// One SQS ListQueues on `endpoint` with the harness's own client
/// ([`crate::services::clients::sqs_client`]), at most 5 s: `Ok` when it answers, else why not
/// (the SDK's error with its context, or the timeout). The first AWS request an instance serves
/// loads its service catalog (about 0.5 s, [`catalog_dir`]); made here, that load is part of
/// the start rather than of the first schedule.
pub(super) async fn list_queues(endpoint: &str) -> std::result::Result<(), String> {
    let call = crate::services::clients::sqs_client(endpoint).list_queues().send();
    match tokio::time::timeout(Duration::from_secs(5), call).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("ListQueues: {}", aws_sdk_sqs::error::DisplayErrorContext(&e))),
        Err(_) => Err("ListQueues did not answer within 5 s".to_string()),
    }
}

/// One GET of `/_localstack/health`: true when `services.sqs` is `available` or `running`.
async fn health_ok(port: u16) -> bool {
    let url = format!("http://127.0.0.1:{port}/_localstack/health");
    tokio::task::spawn_blocking(move || {
        let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(2)).build();
        let v: serde_json::Value = agent.get(&url).call().ok()?.into_json().ok()?;
        let sqs = v["services"]["sqs"].as_str()?.to_string();
        Some(sqs == "available" || sqs == "running")
    })
    .await
    .ok()
    .flatten()
    .unwrap_or(false)
}
