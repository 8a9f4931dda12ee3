//! A throwaway PostgreSQL cluster: `initdb` into a temp dir, then `postgres` on a free port.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::Signal;

use super::binaries;
use super::process::{free_port, ManagedChild};

/// Server settings for a throwaway test cluster: durability off (nothing here must survive a
/// power cut) and `client_connection_check_interval` so that a crashed worker's backend
/// notices its closed socket even while it waits on a lock (PostgreSQL ≥ 14).
const SETTINGS: &[(&str, &str)] = &[
    ("listen_addresses", "127.0.0.1"),
    ("fsync", "off"),
    ("synchronous_commit", "off"),
    ("full_page_writes", "off"),
    ("max_connections", "300"),
    ("client_connection_check_interval", "50ms"),
    ("log_min_messages", "warning"),
];

/// A running cluster.
pub struct Postgres {
    /// `postgres://postgres@127.0.0.1:PORT/postgres`
    pub url: String,
    /// The server process.
    pub child: ManagedChild,
}

/// The unprivileged account to run PostgreSQL as when crashpoint runs as root
/// (`initdb` refuses root): `postgres` if it exists, else `nobody`.
fn run_as() -> Option<nix::unistd::User> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    ["postgres", "nobody"].iter().find_map(|n| nix::unistd::User::from_name(n).ok().flatten())
}

fn as_user(cmd: &mut Command, user: &Option<nix::unistd::User>) {
    if let Some(u) = user {
        cmd.uid(u.uid.as_raw()).gid(u.gid.as_raw()).env("HOME", "/tmp");
    }
}

/// Runs `initdb` and starts `postgres` under `dir` (which must exist and be empty).
/// Waits until a connection succeeds (at most 60 s). Errors: no server binaries
/// ([`crate::error::MissingBinary`]), initdb failing, the server exiting or not answering.
pub async fn start(dir: &Path) -> Result<Postgres> {
    let bindir = binaries::postgres_bindir()?;
    let user = run_as();
    let data = dir.join("data");
    if let Some(u) = &user {
        nix::unistd::chown(dir, Some(u.uid), Some(u.gid)).context("chown of the PostgreSQL dir")?;
    }
    let log = dir.join("postgres.log");
    let mut initdb = Command::new(bindir.join("initdb"));
    initdb
        .args(["-D"])
        .arg(&data)
        .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"])
        .stdin(std::process::Stdio::null());
    as_user(&mut initdb, &user);
    let out = initdb.output().context("running initdb")?;
    if !out.status.success() {
        bail!(
            "initdb failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let port = free_port()?;
    let mut cmd = Command::new(bindir.join("postgres"));
    cmd.arg("-D").arg(&data).arg("-p").arg(port.to_string()).arg("-k").arg(dir);
    for (k, v) in SETTINGS {
        cmd.arg("-c").arg(format!("{k}={v}"));
    }
    as_user(&mut cmd, &user);
    if let Some(u) = &user {
        std::fs::File::create(&log)?;
        nix::unistd::chown(&log, Some(u.uid), Some(u.gid))?;
    }
    let mut child = ManagedChild::spawn("postgres", cmd, &log, Signal::SIGINT)?;
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    wait_ready(&url, &mut child, &log).await?;
    Ok(Postgres { url, child })
}

async fn wait_ready(url: &str, child: &mut ManagedChild, log: &PathBuf) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let opts = crate::services::clients::pg_options(url)?;
    loop {
        use sqlx::ConnectOptions;
        match opts.connect().await {
            Ok(c) => {
                let _ = sqlx::Connection::close(c).await;
                return Ok(());
            }
            Err(e) => {
                if let Some(status) = child.exited() {
                    bail!("postgres exited ({status}) before accepting connections:\n{}", tail(log));
                }
                if let Some(sig) = super::process::interrupted() {
                    bail!("interrupted by signal {sig} while waiting for it to start");
                }
                if Instant::now() > deadline {
                    bail!("postgres did not accept connections within 60 s ({e}):\n{}", tail(log));
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
    }
}

/// The last lines of a log file, for error messages.
pub fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}
