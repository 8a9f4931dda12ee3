//! The native provider: throwaway PostgreSQL, redis-server and LocalStack processes on free
//! loopback ports, all under one temporary directory (in memory when the machine has room:
//! [`services_parent`]).

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

/// The running processes (PostgreSQL, Redis, one or more LocalStacks:
/// [`localstack::instances`]) and their directory. Dropping it (or [`NativeServices::stop`])
/// stops them and removes the directory.
pub struct NativeServices {
    /// Where they listen.
    pub endpoints: Endpoints,
    /// The temporary directory with data, sockets and logs.
    pub dir: PathBuf,
    pg: Option<postgres::Postgres>,
    redis: Option<redis::Redis>,
    /// The first serves [`Endpoints::sqs_endpoint_url`], the others [`Endpoints::sqs_shards`].
    localstack: Vec<localstack::LocalStack>,
    keep_dir: bool,
}

/// The memory-backed directory the services' data goes into when nothing else is asked for.
const SHM: &str = "/dev/shm";

/// Free space [`SHM`] needs to be used (bytes): a cluster after an hour of exploring holds
/// about 90 MB, its WAL included; a container's default `/dev/shm` of 64 MB is too small.
const SHM_FREE_MIN: u64 = 1 << 30;

/// Where the services' temporary directory is created: `TMPDIR` when it is set; otherwise
/// [`SHM`] when it is a tmpfs with at least [`SHM_FREE_MIN`] bytes free; otherwise the
/// system's temp dir. The data is thrown away with the run (durability is off anyway), and on
/// tmpfs the files PostgreSQL creates and unlinks for every TRUNCATE (a new relfilenode per
/// table and index: PostgreSQL docs, "TRUNCATE" and "Database File Layout") cost no ext4 inode
/// allocation, which `perf` showed as about a fifth of PostgreSQL's CPU on ext4 (measured with
/// both benches at once, PostgreSQL CPU per schedule was about 5 % lower).
pub fn services_parent() -> PathBuf {
    if std::env::var_os("TMPDIR").is_some() {
        return std::env::temp_dir();
    }
    let roomy_tmpfs = nix::sys::statfs::statfs(SHM).is_ok_and(|s| {
        s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC && s.blocks_available() * s.block_size() as u64 >= SHM_FREE_MIN
    });
    match roomy_tmpfs {
        true => PathBuf::from(SHM),
        false => std::env::temp_dir(),
    }
}

impl NativeServices {
    /// Starts the services concurrently (PostgreSQL, Redis and [`localstack::instances`]
    /// LocalStacks) and waits until each is ready (LocalStack takes about 10 s; the first run
    /// also installs its venv, about 50 s). Whatever started is stopped again if another one
    /// fails. Errors: a missing binary, a bad [`localstack::INSTANCES_VAR`], a start failure.
    pub async fn start() -> Result<NativeServices> {
        Self::start_with(&super::ports::free_port).await
    }

    /// Like [`NativeServices::start`], each service taking its ports from `ports` (a test
    /// offers ports it holds, to see them given up for others).
    pub async fn start_with(ports: &(dyn Fn() -> Result<u16> + Sync)) -> Result<NativeServices> {
        process::install_signal_cleanup();
        let instances = localstack::instances()?;
        // Check binaries first so that a missing one fails at once, before anything starts.
        binaries::postgres_bindir()?;
        binaries::redis_server()?;
        if localstack::installed_python().is_none() {
            binaries::python3()?;
        }
        // Install the LocalStack venv (once) before anything starts, so that readiness
        // deadlines do not include the install.
        tokio::task::spawn_blocking(localstack::ensure_venv).await??;
        use std::os::unix::fs::PermissionsExt;
        let parent = services_parent();
        let dir = tempfile::Builder::new()
            .prefix("crashpoint-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(&parent)
            .with_context(|| format!("creating the services' temp dir in {}", parent.display()))?
            .keep();
        process::register_dir(dir.clone());
        let mut me = NativeServices {
            endpoints: Endpoints {
                database_url: String::new(),
                sqs_endpoint_url: String::new(),
                sqs_shards: Vec::new(),
                redis_url: String::new(),
            },
            dir: dir.clone(),
            pg: None,
            redis: None,
            localstack: Vec::new(),
            keep_dir: false,
        };
        // Everything under it is private (mode 0700). When crashpoint runs
        // as root, PostgreSQL runs as its own account and must reach its directory inside:
        // that account then owns the top directory (root reaches everything anyway).
        if let Some(u) = postgres::run_as() {
            nix::unistd::chown(&dir, Some(u.uid), Some(u.gid)).context("chown of the services' temp dir")?;
        }
        for sub in ["pg", "redis", "localstack"] {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().mode(0o700).create(dir.join(sub))?;
        }
        let (pg_dir, redis_dir, ls_dir) = (dir.join("pg"), dir.join("redis"), dir.join("localstack"));
        let (pg, rd, ls) = tokio::join!(
            postgres::start(&pg_dir, ports),
            redis::start(&redis_dir, ports),
            futures_util::future::join_all((0..instances).map(|_| localstack::start(&ls_dir, ports))),
        );
        // Keep whatever started so that Drop stops it if another failed.
        let (pg, rd) = (pg.map(|p| me.pg.insert(p).url.clone()), rd.map(|r| me.redis.insert(r).url.clone()));
        let mut sqs = Vec::new();
        let mut failed = None;
        for l in ls {
            match l {
                Ok(l) => {
                    sqs.push(l.endpoint.clone());
                    me.localstack.push(l);
                }
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        let (database_url, redis_url) = (pg?, rd?);
        if let Some(e) = failed {
            return Err(e);
        }
        let sqs_shards = sqs.split_off(1);
        me.endpoints = Endpoints { database_url, sqs_endpoint_url: sqs.remove(0), sqs_shards, redis_url };
        Ok(me)
    }

    /// Stops the processes (postgres with a fast shutdown) and removes the directory.
    pub fn stop(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        let mut localstack: Vec<_> = self.localstack.drain(..).collect();
        let (mut redis, mut pg) = (self.redis.take(), self.pg.take());
        let mut children: Vec<&mut process::ManagedChild> = localstack.iter_mut().map(|l| &mut l.child).collect();
        children.extend(redis.as_mut().map(|r| &mut r.child));
        children.extend(pg.as_mut().map(|p| &mut p.child));
        process::stop_children(&mut children, Duration::from_secs(10));
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
            process::unregister_dir(&self.dir);
        }
    }

    /// Leaves the processes running after this process exits and returns what `down` needs
    /// to stop them later.
    pub fn detach(mut self) -> state::UpState {
        let mut pids = Vec::new();
        for l in self.localstack.drain(..) {
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
            sqs_shards: self.endpoints.sqs_shards.clone(),
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Mutex;

    use super::*;

    fn mode(p: &std::path::Path) -> u32 {
        std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).permissions().mode() & 0o777
    }

    /// Each service is first offered a port that this test holds (a port
    /// taken between being chosen and the bind); each gives it up and starts on another, and
    /// the services' temp dirs are private.
    #[test]
    fn a_port_taken_before_the_bind_is_given_up_for_another_and_temp_dirs_are_0700() {
        let held: Vec<std::net::TcpListener> = (0..3).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
        let taken: Vec<u16> = held.iter().map(|l| l.local_addr().unwrap().port()).collect();
        let offer = Mutex::new(taken.clone());
        let ports = || offer.lock().unwrap().pop().map_or_else(super::super::ports::free_port, Ok);
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let services = rt.block_on(NativeServices::start_with(&ports)).expect("services did not start on other ports");
        let dir = services.dir.clone();
        for url in [&services.endpoints.database_url, &services.endpoints.sqs_endpoint_url, &services.endpoints.redis_url] {
            let port = url::Url::parse(url).unwrap().port().unwrap();
            assert!(!taken.contains(&port), "{url} is on a port this test holds");
        }
        // Each held port was tried by some service, whose log of that attempt says the address
        // was in use; each service started on its first port that was free.
        let mut tried = 0;
        for (sub, name) in [("pg", "postgres"), ("redis", "redis"), ("localstack", "localstack")] {
            let failed: Vec<String> = taken.iter().map(|p| dir.join(sub).join(format!("{name}-{p}.log"))).filter(|l| l.exists()).map(|l| std::fs::read_to_string(l).unwrap()).collect();
            for log in &failed {
                assert!(crate::services::ports::says_address_in_use(log), "{name}'s failed attempt:\n{log}");
            }
            tried += failed.len();
        }
        assert_eq!(tried, taken.len(), "every held port is tried once");
        assert_eq!(mode(&dir), 0o700, "{}", dir.display());
        for sub in ["pg", "redis", "localstack"] {
            assert_eq!(mode(&dir.join(sub)), 0o700, "{sub}");
        }
        services.stop();
        assert!(!dir.exists(), "{} was left behind", dir.display());
        drop(held);
    }

    /// Each LocalStack instance runs in host mode with its files under its own
    /// `localstack/fs-<port>/` (its TLS certificate is made there, not in /var/lib/localstack),
    /// and loads the service catalog copied in from the venv: the start's ListQueues, which
    /// would otherwise build it, leaves the copy older than the certificate LocalStack made at
    /// its start, and a later call rewrites nothing. Its plugin loader's entry-point cache is
    /// its own too (`XDG_CACHE_HOME`).
    #[test]
    fn each_localstack_keeps_its_files_apart_and_uses_the_catalog_built_once() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let services = rt.block_on(NativeServices::start()).expect("services did not start");
        for url in services.endpoints.sqs_endpoints() {
            let port = url::Url::parse(url).unwrap().port().unwrap();
            let root = services.dir.join("localstack").join(format!("fs-{port}"));
            let cache = root.join("var/lib/localstack/cache");
            let catalog: Vec<std::path::PathBuf> = std::fs::read_dir(&cache)
                .unwrap_or_else(|e| panic!("{}: {e}", cache.display()))
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "dill"))
                .collect();
            assert_eq!(catalog.len(), 1, "one service catalog in {}", cache.display());
            let modified = |p: &std::path::Path| std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).modified().unwrap();
            let (copied, certificate) = (modified(&catalog[0]), modified(&cache.join("server.test.pem")));
            assert!(copied < certificate, "{url} rebuilt its service catalog after its start instead of loading the copy");
            rt.block_on(localstack::list_queues(url)).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(modified(&catalog[0]), copied, "{url} rewrote its service catalog");
            // A copy LocalStack cannot load is not rewritten either: it logs this and builds an
            // index in memory (localstack.aws.spec.get_service_catalog).
            let log = std::fs::read_to_string(services.dir.join("localstack").join(format!("localstack-{port}.log"))).unwrap();
            assert!(!log.contains("error while processing service catalog"), "{url} did not load the copy:\n{log}");
            // plux's entry-point cache is the instance's own, not shared with the other
            // instance started at the same moment (nor left in ~/.cache/plux).
            let plux = localstack::xdg_cache_under(&root).join("plux");
            let written: Vec<_> = std::fs::read_dir(&plux).unwrap_or_else(|e| panic!("{url}: {}: {e}", plux.display())).collect();
            assert_eq!(written.len(), 1, "{url}: one entry-point cache in {}", plux.display());
        }
        services.stop();
    }
}
