//! A throwaway PostgreSQL cluster: `initdb` into a temp dir, then `postgres` on a free port.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use nix::sys::signal::Signal;

use super::binaries;
use super::process::ManagedChild;
use crate::services::ports::on_free_port;

/// Server settings for a throwaway test cluster: durability off (nothing here must survive a
/// power cut) and `client_connection_check_interval` so that a crashed worker's backend
/// notices its closed socket even while it waits on a lock (PostgreSQL ≥ 14).
/// `dynamic_shared_memory_type = mmap` keeps the dynamic shared memory segments as files in
/// the data directory (`pg_dynshmem/`, PostgreSQL docs "Resource Consumption"), which goes
/// with the temp dir: with the default `posix`, a server killed by SIGKILL (the service-kill
/// tests) left about 1.1 MB of `PostgreSQL.*` segments in `/dev/shm` for every kill.
const SETTINGS: &[(&str, &str)] = &[
    ("listen_addresses", "127.0.0.1"),
    ("fsync", "off"),
    ("synchronous_commit", "off"),
    ("full_page_writes", "off"),
    ("max_connections", "300"),
    ("client_connection_check_interval", "50ms"),
    ("log_min_messages", "warning"),
    ("dynamic_shared_memory_type", "mmap"),
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
pub(super) fn run_as() -> Option<nix::unistd::User> {
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

/// Runs `initdb` and starts `postgres` under `dir` (which must exist and be empty) on a port
/// from `ports` ([`crate::services::ports::free_port`]): a port taken before the server binds
/// it is given up for the next one ([`on_free_port`]); `initdb` runs once. Waits until a
/// connection succeeds (at most 60 s). Errors: no server binaries
/// ([`crate::error::MissingBinary`]), initdb failing, the server exiting or not answering.
pub async fn start(dir: &Path, ports: impl FnMut() -> Result<u16>) -> Result<Postgres> {
    let bindir = binaries::postgres_bindir()?;
    let user = run_as();
    let data = dir.join("data");
    if let Some(u) = &user {
        nix::unistd::chown(dir, Some(u.uid), Some(u.gid)).context("chown of the PostgreSQL dir")?;
    }
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
    on_free_port(ports, |port| serve(&bindir, dir, &data, &user, port)).await
}

/// Starts the server of the cluster in `data` on `port` and waits until it accepts connections.
async fn serve(bindir: &Path, dir: &Path, data: &Path, user: &Option<nix::unistd::User>, port: u16) -> Result<Postgres> {
    let log = dir.join(format!("postgres-{port}.log"));
    let mut cmd = Command::new(bindir.join("postgres"));
    cmd.arg("-D").arg(data).arg("-p").arg(port.to_string()).arg("-k").arg(dir);
    for (k, v) in SETTINGS {
        cmd.arg("-c").arg(format!("{k}={v}"));
    }
    as_user(&mut cmd, user);
    if let Some(u) = user {
        std::fs::File::create(&log)?;
        nix::unistd::chown(&log, Some(u.uid), Some(u.gid))?;
    }
    let mut child = ManagedChild::spawn("postgres", cmd, &log, Signal::SIGINT)?;
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let opts = crate::services::clients::pg_options(&url)?;
    let ready = async || {
        use sqlx::ConnectOptions;
        let c = opts.connect().await.map_err(|e| e.to_string())?;
        let _ = sqlx::Connection::close(c).await;
        Ok(())
    };
    child.wait_ready(port, &log, (Duration::from_secs(60), Duration::from_millis(25)), "accepted connections", ready).await?;
    Ok(Postgres { url, child })
}
