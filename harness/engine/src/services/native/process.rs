//! Child processes the harness starts, and their cleanup on drop, Ctrl-C and SIGTERM.
//!
//! Every child runs in its own process group, so a terminal's Ctrl-C reaches only crashpoint,
//! which then stops its children in order. A process-wide registry lists the live children
//! and temporary directories; [`install_signal_cleanup`] stops and removes them all on
//! SIGINT/SIGTERM before exiting with status 130/143.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

#[derive(Default)]
struct Registry {
    /// (process group id, name, graceful signal)
    groups: Vec<(i32, String, Signal)>,
    dirs: Vec<PathBuf>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { groups: Vec::new(), dirs: Vec::new() });

/// A running child process, stopped (its whole process group) when dropped.
pub struct ManagedChild {
    /// What it is, for messages: `postgres`, `redis-server`, `localstack`.
    pub name: String,
    child: Child,
    graceful: Signal,
    detached: bool,
}

impl ManagedChild {
    /// Spawns `cmd` in a new process group, with stdout/stderr appended to `log`.
    /// `graceful` is the signal that asks it to shut down (SIGINT for postgres' fast shutdown).
    pub fn spawn(name: &str, mut cmd: Command, log: &std::path::Path, graceful: Signal) -> Result<Self> {
        use std::os::unix::process::CommandExt;
        let out = std::fs::OpenOptions::new().create(true).append(true).open(log)
            .with_context(|| format!("opening log {}", log.display()))?;
        cmd.stdin(Stdio::null()).stdout(out.try_clone()?).stderr(out).process_group(0);
        let child = cmd.spawn().with_context(|| format!("starting {name}"))?;
        REGISTRY.lock().unwrap().groups.push((child.id() as i32, name.to_string(), graceful));
        Ok(ManagedChild { name: name.to_string(), child, graceful, detached: false })
    }

    /// The child's pid (also its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` when the child has already exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Leaves the child running after this handle is dropped (for `crashpoint up`).
    pub fn detach(mut self) {
        self.detached = true;
        unregister_group(self.child.id() as i32);
    }

    /// Waits until `ready` succeeds, at most `timeout`, asking every `poll`; `ready` is asked only
    /// while the child runs and the listener on `port` is its own (the port may have been taken
    /// by another process between being chosen and the bind). `did` says what ready means, for
    /// the errors (`accepted connections`). Errors: [`PortTaken`](crate::services::ports::PortTaken)
    /// when its `log` says the address was in use and the port is not its own (whether the child
    /// exited or, like LocalStack's gateway, runs on without a listener; it is stopped when the
    /// caller drops it); the child's exit, an
    /// interrupting signal, or the timeout (with `ready`'s last error), each with the log's end.
    pub async fn wait_ready(
        &mut self,
        port: u16,
        log: &std::path::Path,
        (timeout, poll): (Duration, Duration),
        did: &str,
        mut ready: impl AsyncFnMut() -> Result<(), String>,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        loop {
            let listening = crate::services::ports::listened_by_group(port, self.pid());
            if self.exited().is_none() && listening {
                match ready().await {
                    Ok(()) => return Ok(()),
                    Err(e) => last = format!(" ({e})"),
                }
            }
            let exited = self.exited();
            let name = &self.name;
            // LocalStack's twisted gateway logs "Couldn't listen on any:PORT: [Errno 98] Address
            // already in use" and goes on running (it even prints "Ready."): its port is lost
            // all the same. Only a line naming this port counts (the log is this port's).
            let lost_port = |l: &str| crate::services::ports::says_address_in_use(l) && l.contains(&format!(":{port}"));
            if exited.is_none() && !listening && tail(log, 40).lines().any(lost_port) {
                return Err(crate::services::ports::PortTaken { service: name.clone(), port }.into());
            }
            if let Some(status) = exited {
                let end = tail(log, 15);
                return Err(crate::services::ports::exit_error(name, port, &end, || {
                    anyhow!("{name} exited ({status}) before it {did}:\n{end}")
                }));
            }
            if let Some(sig) = interrupted() {
                bail!("interrupted by signal {sig} while waiting for {name} to start");
            }
            if Instant::now() > deadline {
                bail!("{name} had not {did} after {} s{last}:\n{}", timeout.as_secs(), tail(log, 15));
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// Asks the child to stop, waits up to `grace`, then kills its process group.
    pub fn stop(&mut self, grace: Duration) {
        stop_children(&mut [self], grace);
    }
}

impl Drop for ManagedChild {
    fn drop(&mut self) {
        if !self.detached {
            self.stop(Duration::from_secs(10));
        }
    }
}

/// Registers process group `pgid` (`name`, for the log) to be sent `graceful` on SIGINT or
/// SIGTERM ([`cleanup_all`]): a child the harness started with a plain [`Command`], such as a
/// team's worker process.
pub fn register_group(pgid: i32, name: &str, graceful: Signal) {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner()).groups.push((pgid, name.to_string(), graceful));
}

/// Forgets process group `pgid` (it was stopped, or handed over).
pub fn unregister_group(pgid: i32) {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner()).groups.retain(|(g, _, _)| *g != pgid);
}

/// Whether any process of group `pgid` is alive.
pub fn group_alive(pgid: i32) -> bool {
    killpg(Pid::from_raw(pgid), None).is_ok()
}

/// Sends each process group its graceful signal, then waits for them together, up to
/// `grace`, and SIGKILLs those still alive. Stopping takes as long as the slowest instead of
/// the sum (a LocalStack takes about 3 s to shut down on SIGTERM; two of them, Redis and
/// PostgreSQL one after another took about 8 s, measured).
pub fn stop_groups(groups: &[(i32, Signal)], grace: Duration) {
    let mut left: Vec<i32> = groups.iter().filter(|(pgid, sig)| killpg(Pid::from_raw(*pgid), *sig).is_ok()).map(|g| g.0).collect();
    let deadline = Instant::now() + grace;
    while !left.is_empty() && Instant::now() < deadline {
        left.retain(|&pgid| {
            // Reap the leader if it is our child, so that it does not linger as a zombie.
            let _ = nix::sys::wait::waitpid(Pid::from_raw(pgid), Some(nix::sys::wait::WaitPidFlag::WNOHANG));
            group_alive(pgid)
        });
        if !left.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for pgid in left {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// Stops `children` together ([`stop_groups`]), then reaps each and forgets it.
pub fn stop_children(children: &mut [&mut ManagedChild], grace: Duration) {
    let groups: Vec<(i32, Signal)> = children.iter().map(|c| (c.child.id() as i32, c.graceful)).collect();
    stop_groups(&groups, grace);
    for c in children.iter_mut() {
        let _ = c.child.wait();
        unregister_group(c.child.id() as i32);
    }
}

/// Registers a temporary directory to remove on SIGINT/SIGTERM.
pub fn register_dir(dir: PathBuf) {
    REGISTRY.lock().unwrap().dirs.push(dir);
}

/// Forgets a directory (it was removed or handed over to `crashpoint up`).
pub fn unregister_dir(dir: &std::path::Path) {
    REGISTRY.lock().unwrap().dirs.retain(|d| d != dir);
}

/// Stops every registered child and removes every registered directory.
pub fn cleanup_all() {
    let (groups, dirs) = {
        let mut r = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
        (std::mem::take(&mut r.groups), std::mem::take(&mut r.dirs))
    };
    for (pgid, name, _) in &groups {
        tracing::info!(%name, pgid, "stopping");
    }
    let groups: Vec<(i32, Signal)> = groups.into_iter().map(|(pgid, _, sig)| (pgid, sig)).collect();
    stop_groups(&groups, Duration::from_secs(10));
    for d in dirs {
        let _ = std::fs::remove_dir_all(&d);
    }
}

static INTERRUPTED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
static REPORTS_PENDING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Longest the signal thread waits for reports being written before it exits, s.
pub const REPORT_GRACE_S: u64 = 15;

/// The signal (2 or 15) that interrupted this process, if one did.
pub fn interrupted() -> Option<i32> {
    match INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// While held, an interrupted process waits (at most [`REPORT_GRACE_S`]) for the holder to
/// finish writing its reports before it exits; drop it once they are written.
pub struct ReportHold(());

impl ReportHold {
    /// Takes a hold.
    pub fn take() -> ReportHold {
        REPORTS_PENDING.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        ReportHold(())
    }
}

impl Drop for ReportHold {
    fn drop(&mut self) {
        REPORTS_PENDING.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Installs (once) a thread that, on SIGINT or SIGTERM, stops everything registered, lets a
/// run that holds a [`ReportHold`] write its reports (it sees [`interrupted`]), and exits with
/// 130 (SIGINT) or 143 (SIGTERM).
pub fn install_signal_cleanup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot install signal handlers: {e}");
                return;
            }
        };
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                // Not eprintln!: a closed stderr (`… 2>&1 | head`) must not end this thread
                // before it has stopped what the run started.
                let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("crashpoint: signal {sig}, stopping the processes it started\n").as_bytes());
                INTERRUPTED.store(sig, std::sync::atomic::Ordering::SeqCst);
                cleanup_all();
                let deadline = std::time::Instant::now() + Duration::from_secs(REPORT_GRACE_S);
                while REPORTS_PENDING.load(std::sync::atomic::Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
                std::process::exit(128 + sig);
            }
        });
    });
}

/// The last `n` lines of a log file, for error messages (empty when it cannot be read).
pub fn tail(log: &std::path::Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
