//! The native provider: throwaway PostgreSQL, redis-server and LocalStack processes on free
//! loopback ports, all under one temporary directory.

pub mod binaries;
pub mod localstack;
pub mod postgres;
pub mod process;
pub mod redis;
pub mod state;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};

use super::Endpoints;

/// The three running processes and their directory. Dropping it (or [`NativeServices::stop`])
/// stops them and removes the directory.
pub struct NativeServices {
    /// Where they listen.
    pub endpoints: Endpoints,
    /// The temporary directory with data, sockets and logs.
    pub dir: PathBuf,
    pg: Option<postgres::Postgres>,
    redis: Option<redis::Redis>,
    localstack: Option<localstack::LocalStack>,
    keep_dir: bool,
}

impl NativeServices {
    /// Starts the three services concurrently and waits until each is ready (LocalStack takes
    /// about 10 s; the first run also installs its venv, about 50 s). Whatever started is
    /// stopped again if another one fails.
    pub async fn start() -> Result<NativeServices> {
        process::install_signal_cleanup();
        // Check binaries first so that a missing one fails at once, before anything starts.
        binaries::postgres_bindir()?;
        binaries::redis_server()?;
        if localstack::installed_python().is_none() {
            binaries::python3()?;
        }
        // Install the LocalStack venv (once) before anything starts, so that readiness
        // deadlines do not include the install.
        tokio::task::spawn_blocking(localstack::ensure_venv).await??;
        let dir = tempfile::Builder::new()
            .prefix("crashpoint-")
            .tempdir()
            .context("creating the services' temp dir")?
            .keep();
        process::register_dir(dir.clone());
        let mut me = NativeServices {
            endpoints: Endpoints {
                database_url: String::new(),
                sqs_endpoint_url: String::new(),
                redis_url: String::new(),
            },
            dir: dir.clone(),
            pg: None,
            redis: None,
            localstack: None,
            keep_dir: false,
        };
        for sub in ["pg", "redis", "localstack"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let (pg_dir, redis_dir, ls_dir) = (dir.join("pg"), dir.join("redis"), dir.join("localstack"));
        let (pg, rd, ls) = tokio::join!(
            postgres::start(&pg_dir),
            redis::start(&redis_dir),
            localstack::start(&ls_dir),
        );
        // Keep whatever started so that Drop stops it if another failed.
        let (pg, rd, ls) = (pg.map(|p| me.pg.insert(p).url.clone()),
            rd.map(|r| me.redis.insert(r).url.clone()),
            ls.map(|l| me.localstack.insert(l).endpoint.clone()));
        me.endpoints = Endpoints { database_url: pg?, redis_url: rd?, sqs_endpoint_url: ls? };
        Ok(me)
    }

    /// Stops the processes (postgres with a fast shutdown) and removes the directory.
    pub fn stop(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        let grace = Duration::from_secs(10);
        if let Some(mut l) = self.localstack.take() {
            l.child.stop(grace);
        }
        if let Some(mut r) = self.redis.take() {
            r.child.stop(grace);
        }
        if let Some(mut p) = self.pg.take() {
            p.child.stop(grace);
        }
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
            process::unregister_dir(&self.dir);
        }
    }

    /// Leaves the processes running after this process exits and returns what `down` needs
    /// to stop them later.
    pub fn detach(mut self) -> state::UpState {
        let mut pids = Vec::new();
        if let Some(l) = self.localstack.take() {
            pids.push(("localstack".to_string(), l.child.pid()));
            l.child.detach();
        }
        if let Some(r) = self.redis.take() {
            pids.push(("redis-server".to_string(), r.child.pid()));
            r.child.detach();
        }
        if let Some(p) = self.pg.take() {
            pids.push(("postgres".to_string(), p.child.pid()));
            p.child.detach();
        }
        self.keep_dir = true;
        process::unregister_dir(&self.dir);
        state::UpState {
            dir: self.dir.clone(),
            database_url: self.endpoints.database_url.clone(),
            sqs_endpoint_url: self.endpoints.sqs_endpoint_url.clone(),
            redis_url: self.endpoints.redis_url.clone(),
            pids,
        }
    }
}

impl Drop for NativeServices {
    fn drop(&mut self) {
        self.stop_all();
    }
}
