//! External workers: a team's real worker process, in any language, driven through the same
//! schedules as an in-process [`crate::sut::Program`], gated at the wire.
//!
//! For each external worker, crashpoint listens on loopback ports of its own choosing with one
//! gating proxy per service ([`pg`], [`sqs`], [`redis`]). Each proxy reads one complete call
//! from the worker, holds it until the scheduler grants it ([`gate`]), forwards it to the real
//! service and relays the reply. A crash is SIGKILL of the worker's process group.

pub mod gate;
pub mod pg;
pub mod host;
pub mod process;
pub mod redis;
pub mod spec;
pub mod sqs;
pub mod worker;

pub use spec::{External, ExternalRaw};

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
