//! A throwaway `redis-server` with no persistence.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::Result;
use nix::sys::signal::Signal;

use super::binaries;
use super::process::ManagedChild;
use crate::services::ports::on_free_port;

/// A running redis-server.
pub struct Redis {
    /// `redis://127.0.0.1:PORT/0`
    pub url: String,
    /// The server process.
    pub child: ManagedChild,
}

/// Starts `redis-server` on a loopback port from `ports` ([`crate::services::ports::free_port`];
/// a port taken before the server binds it is given up for the next one, [`on_free_port`])
/// with `--save ""` and `--appendonly no`, its working dir under `dir`, and waits for `PING`
/// (at most 30 s). Errors: the binary is missing ([`crate::error::MissingBinary`] naming the
/// package `redis-server`), the server exits.
pub async fn start(dir: &Path, ports: impl FnMut() -> Result<u16>) -> Result<Redis> {
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
    let ready = async || {
        let mut c = crate::services::clients::redis_connect(&url).await.map_err(|e| e.to_string())?;
        let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut c).await;
        pong.map(|_| ()).map_err(|e| e.to_string())
    };
    child.wait_ready(port, &log, (Duration::from_secs(30), Duration::from_millis(20)), "answered PING", ready).await?;
    Ok(Redis { url, child })
}
