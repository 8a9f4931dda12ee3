//! An external worker's process: started in a process group of its own, killed with SIGKILL
//! to the whole group (a crash), and reaped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use anyhow::{Context, Result};
use crate::services::cpu::process_ms;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// A running worker process. Dropping it kills its process group with SIGKILL and reaps it, so
/// a crash of the worker's turmoil host is a crash of the process; its log is removed then,
/// unless [`WorkerProcess::keep_log`] was called (an error names the log).
pub struct WorkerProcess {
    child: Child,
    /// Where its stdout and stderr go (under [`logs_dir`]).
    pub log: PathBuf,
    keep_log: bool,
    /// What its start cost, once its first call reached a proxy ([`StartProbe`]).
    start: StartProbe,
}

/// What a worker process's start cost: its CPU time and the wall time from its start to its
/// first call at a proxy (ms each), recorded by its host ([`StartProbe::first_call`]) and
/// summed into [`team_cpu`] when the process ends. Clones share the record.
#[derive(Clone)]
pub struct StartProbe {
    pid: u32,
    started: Instant,
    at_first_call: Arc<Mutex<Option<(f64, f64)>>>,
    /// Its CPU time at the last reading, ms: a process that exited and was reaped reads as
    /// gone, and counts what it used until then.
    last_ms: Arc<Mutex<f64>>,
}

impl StartProbe {
    /// Records, once, that the process's first call reached a proxy now.
    pub fn first_call(&self) {
        let mut at = self.at_first_call.lock().unwrap_or_else(|e| e.into_inner());
        if at.is_none() {
            let cpu = process_ms(self.pid).unwrap_or(0.0);
            *at = Some((cpu, self.started.elapsed().as_secs_f64() * 1e3));
        }
    }

    /// Adds what the process cost so far to `sum`: its CPU in all ([`StartProbe::cpu_ms`]) and,
    /// once its first call was recorded, its start's CPU and wall time.
    fn add_to(&self, sum: &mut TeamCpu) {
        sum.total_ms += self.cpu_ms();
        if let Some((cpu, wall)) = *self.at_first_call.lock().unwrap_or_else(|e| e.into_inner()) {
            sum.start_ms += cpu;
            sum.start_wall_ms += wall;
        }
    }

    /// Its CPU time now, ms, or at the last reading when it can no longer be read (it was
    /// reaped): never less than an earlier reading.
    fn cpu_ms(&self) -> f64 {
        let mut last = self.last_ms.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(now) = process_ms(self.pid) {
            *last = last.max(now);
        }
        *last
    }
}

/// What the team's worker processes this harness process started cost: those that ended, and
/// those still running (a process kept between schedules, [`super::keep`]) as far as they got.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct TeamCpu {
    /// Processes started.
    pub processes: u64,
    /// CPU time from exec to the first call at a proxy (the runtime's and libraries' start,
    /// the connections opened), ms, summed over those that made one.
    pub start_ms: f64,
    /// Wall time from the start to the first call, ms, summed likewise.
    pub start_wall_ms: f64,
    /// CPU time in all (user + system, its reaped children's included), ms.
    pub total_ms: f64,
}

impl TeamCpu {
    /// `self - earlier`.
    pub fn since(&self, earlier: &TeamCpu) -> TeamCpu {
        TeamCpu {
            processes: self.processes - earlier.processes,
            start_ms: self.start_ms - earlier.start_ms,
            start_wall_ms: self.start_wall_ms - earlier.start_wall_ms,
            total_ms: self.total_ms - earlier.total_ms,
        }
    }
}

/// The ended processes' sums, and the running ones' start probes.
struct Team {
    ended: TeamCpu,
    running: Vec<StartProbe>,
}

static TEAM: Mutex<Team> =
    Mutex::new(Team { ended: TeamCpu { processes: 0, start_ms: 0.0, start_wall_ms: 0.0, total_ms: 0.0 }, running: Vec::new() });

fn team() -> std::sync::MutexGuard<'static, Team> {
    TEAM.lock().unwrap_or_else(|e| e.into_inner())
}

/// The team's processes' CPU so far ([`TeamCpu`]): the ended ones', and the running ones' as
/// `/proc` gives it now.
pub fn team_cpu() -> TeamCpu {
    let t = team();
    let mut sum = t.ended;
    for p in &t.running {
        p.add_to(&mut sum);
    }
    sum
}

/// This process's directory for external workers' logs (see [`logs_dir`]).
static LOGS: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// This process's directory for external workers' logs, `$TMPDIR/crashpoint-workers-XXXXXX`,
/// created on first use with mode 0700 and removed by
/// [`remove_logs_dir`]. Errors: the directory cannot be created.
pub fn logs_dir() -> Result<&'static Path> {
    let dir = LOGS.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let private = std::fs::Permissions::from_mode(0o700);
        let dir = tempfile::Builder::new().prefix("crashpoint-workers-").permissions(private).tempdir().map_err(|e| format!("{e}"))?.keep();
        crate::services::native::process::register_dir(dir.clone());
        Ok(dir)
    });
    dir.as_deref().map_err(|e| anyhow::anyhow!("creating a directory for external workers' logs: {e}"))
}

/// The environment variable that keeps every external worker's log (`1`): with `crashpoint
/// repro` of a failing schedule, what the team's process printed in exactly that run.
pub const KEEP_LOGS_VAR: &str = "CRASHPOINT_KEEP_WORKER_LOGS";

/// Whether [`KEEP_LOGS_VAR`] is set to a value other than `0` or empty.
fn keep_all_logs() -> bool {
    std::env::var(KEEP_LOGS_VAR).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Removes [`logs_dir`], if it was created, when it holds no log; a log kept because its
/// worker failed (an error named it) stays, with its directory. With [`KEEP_LOGS_VAR`] every
/// log stays, and the directory is named on stderr. Called at the end of `crashpoint`'s
/// `main` and at the exit of a test process.
pub fn remove_logs_dir() {
    if let Some(Ok(dir)) = LOGS.get() {
        if keep_all_logs() {
            eprintln!("crashpoint: the external workers' logs are kept in {} ({KEEP_LOGS_VAR})", dir.display());
        }
        // Removed, or kept for the logs an error named: either way no cleanup removes it later.
        let _ = std::fs::remove_dir(dir);
        crate::services::native::process::unregister_dir(dir);
    }
}

impl WorkerProcess {
    /// Starts `command` in `cwd` with `env` added, in a new process group, stdout and stderr
    /// appended to `log`. Errors: the program cannot be started (with its path and the reason).
    pub fn spawn(command: &[String], cwd: &Path, env: &[(String, String)], log: PathBuf) -> Result<WorkerProcess> {
        use std::os::unix::process::CommandExt;
        // After Ctrl-C or SIGTERM the signal thread has stopped every registered process: one
        // started now would outlive crashpoint.
        if let Some(sig) = crate::services::native::process::interrupted() {
            anyhow::bail!("not starting external worker `{}`: crashpoint is stopping (signal {sig})", command.join(" "));
        }
        let out = std::fs::OpenOptions::new().create(true).append(true).open(&log).with_context(|| format!("opening {}", log.display()))?;
        let err = out.try_clone()?;
        let child = Command::new(&command[0])
            .args(&command[1..])
            .current_dir(cwd)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting external worker `{}` in {}", command.join(" "), cwd.display()))?;
        let start = StartProbe { pid: child.id(), started: Instant::now(), at_first_call: Arc::default(), last_ms: Arc::default() };
        {
            let mut t = team();
            t.ended.processes += 1;
            t.running.push(start.clone());
        }
        // Killed on Ctrl-C and SIGTERM too, wherever it is (a kept one waits between schedules).
        crate::services::native::process::register_group(child.id() as i32, "external worker", Signal::SIGKILL);
        Ok(WorkerProcess { child, log, keep_log: false, start })
    }

    /// What records its start's cost, for its host ([`StartProbe::first_call`]).
    pub fn start_probe(&self) -> StartProbe {
        self.start.clone()
    }

    /// Its pid (also its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Keeps its log when it is dropped (an error names it).
    pub fn keep_log(&mut self) {
        self.keep_log = true;
    }

    /// Its exit status, if it has exited (its CPU time read first: a reaped process is gone
    /// from `/proc`).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        // waitid(2) with WNOWAIT: whether it exited, leaving it a zombie whose CPU time
        // /proc still gives.
        // SAFETY: `info` is a valid, writable siginfo_t for the duration of the call.
        let gone = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(libc::P_PID, self.child.id() as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT) == 0
                && info.si_pid() != 0
        };
        if !gone {
            return None;
        }
        self.start.cpu_ms();
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        // Its cost, read before the kill (a reaped process is gone from /proc: then its last
        // reading), moves from the running to the ended.
        {
            let mut t = team();
            t.running.retain(|p| p.pid != self.start.pid);
            self.start.add_to(&mut t.ended);
        }
        let _ = killpg(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
        crate::services::native::process::unregister_group(self.child.id() as i32);
        if !self.keep_log && !keep_all_logs() {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// The logs directory is private, a worker the harness stopped leaves no log
    /// behind, and a worker whose log an error names keeps it.
    #[test]
    fn worker_logs_are_private_and_removed_unless_an_error_names_them() {
        let dir = logs_dir().unwrap();
        assert_eq!(std::fs::metadata(dir).unwrap().permissions().mode() & 0o777, 0o700, "{}", dir.display());
        let sh = |name: &str| {
            let cmd = ["sh".to_string(), "-c".into(), "echo started; sleep 30".into()];
            WorkerProcess::spawn(&cmd, Path::new("/"), &[], dir.join(format!("test-{name}-{}.log", std::process::id()))).unwrap()
        };
        let (stopped, mut failed) = (sh("stopped"), sh("failed"));
        let (a, b) = (stopped.log.clone(), failed.log.clone());
        assert!(a.exists() && b.exists());
        drop(stopped);
        failed.keep_log();
        drop(failed);
        assert!(!a.exists(), "the log of a worker the harness stopped was left in {}", dir.display());
        assert!(b.exists(), "the log an error names was removed");
        std::fs::remove_file(b).unwrap();
        remove_logs_dir();
        assert!(!dir.exists(), "the empty logs directory {} was left behind", dir.display());
    }
}
