//! A throwaway `redis-server` with no persistence.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use nix::sys::signal::Signal;

use super::binaries;
use super::postgres::tail;
use super::process::ManagedChild;
use crate::services::ports::{exit_error, free_port, listened_by_group, on_free_port};

/// A running redis-server.
pub struct Redis {
    /// `redis://127.0.0.1:PORT/0`
    pub url: String,
    /// The server process.
    pub child: ManagedChild,
}

/// Starts `redis-server` on a free loopback port with `--save ""` and `--appendonly no`, its
/// working dir under `dir`, and waits for `PING` (at most 30 s). Errors: the binary is missing
/// ([`crate::error::MissingBinary`] naming the package `redis-server`), the server exits.
pub async fn start(dir: &Path) -> Result<Redis> {
    start_on(dir, free_port).await
}

/// Like [`start`], with the ports to try from `ports`: a port taken before the server binds it
/// is given up for the next one ([`on_free_port`]).
pub async fn start_on(dir: &Path, ports: impl FnMut() -> Result<u16>) -> Result<Redis> {
    let bin = binaries::redis_server()?;
    on_free_port(ports, |port| attempt(&bin, dir, port)).await
}

async fn attempt(bin: &Path, dir: &Path, port: u16) -> Result<Redis> {
    let mut cmd = Command::new(bin);
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--daemonize", "no", "--dir"])
        .arg(dir);
    let log = dir.join(format!("redis-{port}.log"));
    let mut child = ManagedChild::spawn("redis-server", cmd, &log, Signal::SIGTERM)?;
    let url = format!("redis://127.0.0.1:{port}/0");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // Only our own listener counts: the port may have been taken by another process.
        if child.exited().is_none() && listened_by_group(port, child.pid()) {
            if let Ok(mut c) = crate::services::clients::redis_connect(&url).await {
                let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut c).await;
                if pong.is_ok() {
                    return Ok(Redis { url, child });
                }
            }
        }
        if let Some(status) = child.exited() {
            let log = tail(&log);
            return Err(exit_error("redis-server", port, &log, || anyhow!("redis-server exited ({status}):\n{log}")));
        }
        if let Some(sig) = super::process::interrupted() {
            bail!("interrupted by signal {sig} while waiting for it to start");
        }
        if Instant::now() > deadline {
            bail!("redis-server did not answer PING within 30 s:\n{}", tail(&log));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
