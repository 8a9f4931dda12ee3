//! The state file that `crashpoint up` writes and `crashpoint down` reads:
//! `<cache dir>/up.json` with the process group ids, the directory and the endpoints.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

use super::{localstack::cache_dir, process};

/// What `up` left running.
#[derive(Debug, Serialize, Deserialize)]
pub struct UpState {
    /// The services' temporary directory (removed by `down`).
    pub dir: PathBuf,
    /// PostgreSQL URL.
    pub database_url: String,
    /// SQS endpoint.
    pub sqs_endpoint_url: String,
    /// Further SQS endpoints, one per further LocalStack instance (absent in the state files
    /// of earlier versions).
    #[serde(default)]
    pub sqs_shards: Vec<String>,
    /// Redis URL.
    pub redis_url: String,
    /// (name, process group id) of each process.
    pub pids: Vec<(String, u32)>,
}

/// `$CRASHPOINT_STATE_FILE`, else `<cache dir>/up.json`.
pub fn path() -> PathBuf {
    std::env::var_os("CRASHPOINT_STATE_FILE").map(PathBuf::from).unwrap_or_else(|| cache_dir().join("up.json"))
}

/// Writes the state file. Errors: the cache dir is not writable.
pub fn save(s: &UpState) -> Result<()> {
    let p = path();
    std::fs::create_dir_all(p.parent().unwrap())?;
    std::fs::write(&p, serde_json::to_vec_pretty(s)?).with_context(|| format!("writing {}", p.display()))
}

/// Reads the state file; `Ok(None)` when `up` left nothing running. Errors name the file when
/// it exists but does not parse.
pub fn load() -> Result<Option<UpState>> {
    let p = path();
    match std::fs::read(&p) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .with_context(|| format!("{} is not a crashpoint state file", p.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

/// Stops every process of the state together (postgres with SIGINT, a fast shutdown; the others
/// with SIGTERM; SIGKILL after 10 s), removes its directory and the state file. Returns the names
/// of the processes that were still running.
pub fn stop(s: &UpState) -> Result<Vec<String>> {
    let mut stopped = Vec::new();
    let mut groups = Vec::new();
    for (name, pgid) in &s.pids {
        let pgid = *pgid as i32;
        if process::group_alive(pgid) {
            groups.push((pgid, if name == "postgres" { Signal::SIGINT } else { Signal::SIGTERM }));
            stopped.push(name.clone());
        }
    }
    process::stop_groups(&groups, Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&s.dir);
    let _ = std::fs::remove_file(path());
    Ok(stopped)
}
