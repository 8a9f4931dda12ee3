//! An external worker's process: started in a process group of its own, killed with SIGKILL
//! to the whole group (a crash), and reaped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// A running worker process. Dropping it kills its process group with SIGKILL and reaps it, so
/// a crash of the worker's turmoil host is a crash of the process.
pub struct WorkerProcess {
    child: Child,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

impl WorkerProcess {
    /// Starts `command` in `cwd` with `env` added, in a new process group, stdout and stderr
    /// appended to `log`. Errors: the program cannot be started (with its path and the reason).
    pub fn spawn(command: &[String], cwd: &Path, env: &[(String, String)], log: PathBuf) -> Result<WorkerProcess> {
        use std::os::unix::process::CommandExt;
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
        Ok(WorkerProcess { child, log })
    }

    /// Its pid (also its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last `n` lines of `log`, for an error message.
pub fn tail(log: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
