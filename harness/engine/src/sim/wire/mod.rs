//! External workers: a team's real worker process, in any language, driven through the same
//! schedules as an in-process [`crate::sim::cx::Program`], gated at the wire.
//!
//! For each external worker, crashpoint listens on loopback ports of its own choosing with one
//! gating proxy per service ([`pg`], [`sqs`], [`redis`]), serves the workload's providers
//! ([`http`]) and delivers their webhooks to the endpoints the process serves ([`webhook`]).
//! Each proxy reads one complete call
//! from the worker, holds it until the scheduler grants it ([`admit`]), forwards it to the real
//! service and relays the reply. A crash is SIGKILL of the worker's process group.

pub mod admit;
pub mod pg;
pub mod host;
pub mod http;
pub mod keep;
pub mod process;
pub mod redis;
pub mod external;
pub mod sqs;
pub mod webhook;
pub mod worker;

pub use external::{External, ExternalRaw, Variant};

/// Runs `ext`'s `setup` command (e.g. making a venv) once per crashpoint process. Errors: the
/// command cannot start or exits non-zero (with its output), so the run fails before any
/// schedule starts, naming what is missing.
pub fn prepare(ext: &External) -> anyhow::Result<()> {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static DONE: Mutex<BTreeSet<Vec<String>>> = Mutex::new(BTreeSet::new());
    let Some(cmd) = &ext.setup else { return Ok(()) };
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    if done.contains(cmd) || cmd.is_empty() {
        return Ok(());
    }
    let out = std::process::Command::new(&cmd[0])
        .args(&cmd[1..])
        .current_dir(&ext.cwd)
        .output()
        .map_err(|e| anyhow::anyhow!("setup `{}` in {}: {e}", cmd.join(" "), ext.cwd.display()))?;
    if !out.status.success() {
        anyhow::bail!(
            "setup `{}` failed ({}):\n{}{}",
            cmd.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    done.insert(cmd.clone());
    Ok(())
}

/// What the report says of an external worker role.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkerInfo {
    /// The role it plays (`c`).
    pub role: String,
    /// Its command line.
    pub command: String,
    /// The first line its program prints for `--version` (`Python 3.11.7`), or why not.
    pub runtime: String,
    /// The first SDK retry header its SQS requests carried in this crashpoint process
    /// (`amz-sdk-request: attempt=1; max=4`), or `none seen`.
    pub sdk_retries: String,
}

/// Retry headers seen on the wire, by worker command line: the first one seen.
static RETRY_HEADERS: std::sync::Mutex<std::collections::BTreeMap<String, String>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Records a retry header seen from the worker run by `command`.
pub(crate) fn saw_retry_header(command: &str, header: String) {
    let mut m = RETRY_HEADERS.lock().unwrap_or_else(|e| e.into_inner());
    if !m.contains_key(command) {
        m.insert(command.to_string(), header);
    }
}

/// The report's description of `ext`. Runs `<program> --version` once per program.
pub fn info(ext: &External) -> WorkerInfo {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    static VERSIONS: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());
    let program = ext.command[0].clone();
    let runtime = VERSIONS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(program.clone())
        .or_insert_with(|| match std::process::Command::new(&program).arg("--version").current_dir(&ext.cwd).output() {
            Ok(o) => {
                let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
                text.lines().next().unwrap_or("").trim().to_string()
            }
            Err(e) => format!("`{program} --version` failed: {e}"),
        })
        .clone();
    let sdk_retries = RETRY_HEADERS.lock().unwrap_or_else(|e| e.into_inner()).get(&ext.command.join(" ")).cloned().unwrap_or_else(|| "none seen".into());
    WorkerInfo { role: ext.role.to_string(), command: ext.command.join(" "), runtime, sdk_retries }
}
