//! When a concurrent external worker has finished reacting: its process made no wire event
//! and used no CPU for [`QUIET_MS`].
//!
//! A worker that makes one call at a time has reacted to a reply once its next call is held.
//! A concurrent one may make any number of calls after a reply (a batch of ten handlers each
//! start a transaction), so the scheduler waits until its process is quiet: no byte moved
//! through its proxies ([`crate::sim::world::Mailbox::activity`]), no ungated exchange or granted
//! call under way, and its threads' CPU time (`/proc/<pid>/task/*/schedstat`, ns) unchanged
//! for [`QUIET_MS`], none of them runnable (`/proc/<pid>/task/*/stat`). A process that reacts to its own timers (a heartbeat) moves on real
//! time: the calls such a timer makes are held like any other, in the settle they arrive in.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::sim::world::{SharedWorld, Status};

/// Real time a concurrent worker's process must stay still before the scheduler deems it
/// settled, ms.
pub const QUIET_MS: u64 = 3;

/// What the scheduler last saw of each concurrent worker.
#[derive(Default)]
pub struct Quiet {
    seen: BTreeMap<String, Seen>,
}

struct Seen {
    activity: u64,
    cpu_ns: u64,
    since: Instant,
}

impl Quiet {
    /// Whether worker `w`'s process has been still for [`QUIET_MS`]. When it has and holds no
    /// call, it waits for work ([`Status::Waiting`]).
    pub fn settled(&mut self, w: &str, world: &SharedWorld) -> bool {
        let (activity, pid) = {
            let mut world = world.borrow_mut();
            let s = world.mailbox(w);
            (s.activity, s.process_pid)
        };
        let now = Instant::now();
        let seen = self.seen.entry(w.to_string()).or_insert_with(|| Seen {
            activity: u64::MAX,
            cpu_ns: 0,
            since: now,
        });
        if seen.activity != activity {
            *seen = Seen {
                activity,
                cpu_ns: cpu_ns(pid),
                since: now,
            };
            return false;
        }
        if now.duration_since(seen.since) < Duration::from_millis(QUIET_MS) {
            return false;
        }
        let cpu = cpu_ns(pid);
        if cpu != seen.cpu_ns || cpu == u64::MAX {
            *seen = Seen {
                activity,
                cpu_ns: cpu,
                since: now,
            };
            return false;
        }
        let mut world = world.borrow_mut();
        let s = world.mailbox(w);
        if !s.has_units() && s.pending == 0 {
            if let Status::Running { at, .. } = s.status {
                s.status = Status::Waiting { at };
            }
        }
        true
    }

    /// Forgets worker `w` (killed: its next process starts afresh).
    pub fn forget(&mut self, w: &str) {
        self.seen.remove(w);
    }
}

/// The CPU time of every thread of process `pid`, ns (0 when it cannot be read), or
/// `u64::MAX` while one of them is runnable: a thread waiting for a CPU (the machine is busy)
/// uses none, yet it has not finished reacting.
fn cpu_ns(pid: Option<u32>) -> u64 {
    let Some(pid) = pid else { return 0 };
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    let mut sum = 0u64;
    for t in tasks.flatten() {
        // `pid (comm) S …`: the state follows the last `)`.
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        if stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('R'))
        {
            return u64::MAX;
        }
        let ns = std::fs::read_to_string(t.path().join("schedstat")).ok();
        sum += ns
            .and_then(|text| {
                text.split_whitespace()
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
            })
            .unwrap_or(0);
    }
    sum
}
