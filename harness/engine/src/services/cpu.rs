//! CPU time of the harness and of the service processes, read from `/proc` (Linux), for the
//! bench: which of them is the ceiling of exploration.
//!
//! A service is found by the TCP port it listens on (`/proc/net/tcp*` → socket inode → the
//! process holding it), so the figures cover services the harness started and services
//! started by `crashpoint up` or by the machine alike. A service's CPU is that of its process
//! and every descendant, the exited ones included (`cutime`/`cstime` of their parent, which
//! reaped them): PostgreSQL forks a backend per connection.

use std::collections::BTreeMap;

use super::Endpoints;

/// One reading of cumulative CPU time (user + system), ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct CpuTimes {
    /// This process (every thread: the slots, the admin runtimes), ms.
    pub harness_ms: f64,
    /// The LocalStack process trees, every instance's whose listener was found, ms (`None`:
    /// none was found, or an instance's process was gone when read).
    pub localstack_ms: Option<f64>,
    /// The PostgreSQL postmaster and its backends, ms.
    pub postgres_ms: Option<f64>,
    /// redis-server, ms.
    pub redis_ms: Option<f64>,
}

impl CpuTimes {
    /// `self - earlier`, service by service (a service missing in either is `None`).
    pub fn since(&self, earlier: &CpuTimes) -> CpuTimes {
        let d = |a: Option<f64>, b: Option<f64>| Some(a? - b?);
        CpuTimes {
            harness_ms: self.harness_ms - earlier.harness_ms,
            localstack_ms: d(self.localstack_ms, earlier.localstack_ms),
            postgres_ms: d(self.postgres_ms, earlier.postgres_ms),
            redis_ms: d(self.redis_ms, earlier.redis_ms),
        }
    }
}

/// CPU time (user + system) the calling thread has used so far, ms
/// (`CLOCK_THREAD_CPUTIME_ID`; 0 where the clock is unavailable).
pub fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
    if !ok {
        return 0.0;
    }
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

/// The service processes found behind a set of endpoints.
#[derive(Debug, Clone)]
pub struct CpuProbe {
    /// One per SQS endpoint whose listener was found ([`Endpoints::sqs_endpoints`]).
    localstack: Vec<i32>,
    postgres: Option<i32>,
    redis: Option<i32>,
}

/// The port of a service URL (`None` for a Unix socket or an unparsable URL).
fn port_of(url: &str, default: u16) -> Option<u16> {
    let u = url::Url::parse(url).ok()?;
    u.host_str()?;
    Some(u.port().unwrap_or(default))
}

impl CpuProbe {
    /// Finds the processes listening on the endpoints' ports (LocalStack 4566, PostgreSQL
    /// 5432, Redis 6379 by default; every LocalStack instance, whose CPU is summed). A service behind another machine, a Unix socket or a
    /// container's proxy is not found: its figures are `None`.
    pub fn new(endpoints: &Endpoints) -> CpuProbe {
        CpuProbe {
            localstack: endpoints.sqs_endpoints().filter_map(|u| port_of(u, 4566).and_then(super::ports::listener_pid)).collect(),
            postgres: port_of(&endpoints.database_url, 5432).and_then(super::ports::listener_pid),
            redis: port_of(&endpoints.redis_url, 6379).and_then(super::ports::listener_pid),
        }
    }

    /// The cumulative CPU time of each, now.
    pub fn read(&self) -> CpuTimes {
        let stats: BTreeMap<i32, procfs::process::Stat> = procfs::process::all_processes()
            .map(|ps| ps.flatten().filter_map(|p| Some((p.pid, p.stat().ok()?))).collect())
            .unwrap_or_default();
        let ms_per_tick = ms_per_tick();
        let own = |s: &procfs::process::Stat| (s.utime + s.stime) as f64 * ms_per_tick;
        let tree = |root: Option<i32>| -> Option<f64> {
            let root = root?;
            let r = stats.get(&root)?;
            let reaped = (r.cutime + r.cstime).max(0) as f64 * ms_per_tick;
            let live: f64 = stats.values().filter(|s| descends(&stats, s.pid, root)).map(own).sum();
            Some(reaped + live)
        };
        CpuTimes {
            harness_ms: procfs::process::Process::myself().and_then(|p| p.stat()).map(|s| own(&s)).unwrap_or(0.0),
            localstack_ms: match self.localstack.is_empty() {
                true => None,
                false => self.localstack.iter().map(|p| tree(Some(*p))).sum(),
            },
            postgres_ms: tree(self.postgres),
            redis_ms: tree(self.redis),
        }
    }
}

/// Milliseconds per clock tick of `/proc/<pid>/stat`'s times.
fn ms_per_tick() -> f64 {
    1e3 / procfs::ticks_per_second() as f64
}

/// The CPU time of process `pid` and of the children it reaped, ms (`/proc/<pid>/stat`:
/// utime + stime + cutime + cstime); `None` when it is gone. One read: for a process whose
/// live children do not matter (a team's worker, read at its first call and before its kill).
pub fn process_ms(pid: u32) -> Option<f64> {
    let s = procfs::process::Process::new(pid as i32).ok()?.stat().ok()?;
    Some((s.utime + s.stime) as f64 * ms_per_tick() + (s.cutime + s.cstime).max(0) as f64 * ms_per_tick())
}

/// Whether `pid` is `root` or one of its descendants in `stats` (ppid links).
fn descends(stats: &BTreeMap<i32, procfs::process::Stat>, mut pid: i32, root: i32) -> bool {
    for _ in 0..64 {
        if pid == root {
            return true;
        }
        match stats.get(&pid) {
            Some(s) if s.ppid > 0 && s.ppid != pid => pid = s.ppid,
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_counts_for_its_ancestors_only() {
        let mut stats = BTreeMap::new();
        let me = procfs::process::Process::myself().unwrap().stat().unwrap();
        for (pid, ppid) in [(1, 0), (10, 1), (11, 10), (12, 11), (20, 1)] {
            let mut s = me.clone();
            s.pid = pid;
            s.ppid = ppid;
            stats.insert(pid, s);
        }
        assert!(descends(&stats, 12, 10));
        assert!(descends(&stats, 10, 10));
        assert!(!descends(&stats, 20, 10));
        assert!(!descends(&stats, 1, 10));
    }

    #[test]
    fn this_process_spends_cpu() {
        let before = CpuProbe { localstack: Vec::new(), postgres: None, redis: None }.read();
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        let after = CpuProbe { localstack: Vec::new(), postgres: None, redis: None }.read();
        assert!(after.since(&before).harness_ms > 0.0, "{x}");
        assert_eq!(after.localstack_ms, None);
    }
}
