//! When a concurrent external worker has finished reacting: its process made no wire event
//! and used no CPU for [`QUIET_MS`].
//!
//! A worker that makes one call at a time has reacted to a reply once its next call is held.
//! A concurrent one may make any number of calls after a reply (a batch of ten handlers each
//! start a transaction), so the scheduler waits until its process is quiet: no byte moved
//! through its proxies ([`crate::sim::world::Mailbox::activity`]), no ungated exchange or granted
//! call under way, and its CPU time (its CPU-time clock, ns, every thread's) unchanged for
//! [`QUIET_MS`], none of its threads runnable or in a disk wait (`/proc/<pid>/task/*/stat`, read only then, and
//! not again while its CPU time and its bytes stay unchanged), and nothing it sent waiting in the kernel for a proxy
//! (a connection not accepted, bytes not read: [`crate::sim::world::Sockets`]). A process that reacts to its own timers (a heartbeat) moves on real
//! time: the calls such a timer makes are held like any other, in the settle they arrive in.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Whether its threads were found not runnable at `cpu_ns`, once it was still for
    /// [`QUIET_MS`].
    scanned: bool,
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
            scanned: false,
        });
        if seen.activity != activity {
            *seen = Seen {
                activity,
                cpu_ns: cpu_ns(pid),
                since: now,
                scanned: false,
            };
            return false;
        }
        if now.duration_since(seen.since) < Duration::from_millis(QUIET_MS) {
            return false;
        }
        let cpu = cpu_ns(pid);
        // Still for QUIET_MS by its CPU clock: only then are its threads looked at one by one,
        // and not again while it stays still and moves no byte. A reply delivered (bytes
        // through a proxy) resets `seen`, so a thread that must react to it and waits for a
        // CPU is always seen runnable. Only a thread its own timer woke can be missed while it
        // waits for a CPU: a timer's calls land in whatever settle they arrive in anyway (the
        // module's doc), and scanning every QUIET_MS instead cost about 50 ms of harness CPU
        // per invoices/explore schedule (release: 122–130 against 76–77 ms).
        let scan = !seen.scanned;
        if cpu != seen.cpu_ns || (scan && (runnable(pid) || waiting_at_a_proxy(w, world))) {
            *seen = Seen {
                activity,
                cpu_ns: cpu,
                since: now,
                scanned: false,
            };
            return false;
        }
        seen.scanned = true;
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

/// Whether something worker `w` sent waits in the kernel for one of its proxies: a connection
/// not accepted yet, or bytes not read yet ([`crate::sim::world::Sockets`]). Its process has
/// then finished with them, used no CPU since and has no thread runnable, yet the call they
/// carry is still to come: the proxy takes it at a step of the scheduler's, a real-time pause
/// or two later, which on a loaded machine can be after [`QUIET_MS`] (a pooled client's new
/// connection, accepted, then read, then parsed, took three steps).
fn waiting_at_a_proxy(w: &str, world: &SharedWorld) -> bool {
    let mut world = world.borrow_mut();
    let sockets = &world.mailbox(w).sockets;
    counted(|| waiting(sockets))
}

/// Whether a connection waits in one of `sockets`' listening sockets, or bytes in one of its
/// accepted connections.
fn waiting(sockets: &crate::sim::world::Sockets) -> bool {
    let pending_accept = sockets.listening.iter().filter(|fd| fd.still()).any(|fd| {
        let mut p = libc::pollfd { fd: fd.fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, for the duration of the call; a timeout of 0 only looks.
        unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLIN != 0 }
    });
    let unread = || {
        sockets.accepted.iter().filter(|fd| fd.still()).any(|fd| {
            let mut n: libc::c_int = 0;
            // SAFETY: FIONREAD writes one c_int, the bytes queued for reading, to `n`.
            unsafe { libc::ioctl(fd.fd, libc::FIONREAD, &mut n) == 0 && n > 0 }
        })
    };
    pending_accept || unread()
}

/// Reads of a process's threads ([`cpu_ns`]) so far, in this harness process.
static READS: AtomicU64 = AtomicU64::new(0);
/// The harness's CPU spent in them, ns.
static READS_CPU_NS: AtomicU64 = AtomicU64::new(0);

/// What waiting for quiet has cost the harness so far: reads of a process's threads in
/// `/proc`, and the harness CPU they took, ms (for `crashpoint bench`).
pub fn cost() -> (u64, f64) {
    (READS.load(Ordering::Relaxed), READS_CPU_NS.load(Ordering::Relaxed) as f64 / 1e6)
}

/// [`read_cpu_ns`], counted in [`cost`].
fn cpu_ns(pid: Option<u32>) -> u64 {
    counted(|| read_cpu_ns(pid))
}

/// [`any_runnable`], counted in [`cost`].
fn runnable(pid: Option<u32>) -> bool {
    counted(|| any_runnable(pid))
}

/// `read()`, its harness CPU counted in [`cost`].
fn counted<T>(read: impl FnOnce() -> T) -> T {
    let before = crate::services::cpu::thread_cpu_ms();
    let v = read();
    let spent = (crate::services::cpu::thread_cpu_ms() - before).max(0.0);
    READS.fetch_add(1, Ordering::Relaxed);
    READS_CPU_NS.fetch_add((spent * 1e6) as u64, Ordering::Relaxed);
    v
}

/// The CPU time of process `pid`, every thread's, the exited ones' included, ns (its CPU-time
/// clock, `clock_getcpuclockid(3)`: one system call, whatever its number of threads); 0 when
/// it cannot be read.
fn read_cpu_ns(pid: Option<u32>) -> u64 {
    let Some(pid) = pid else { return 0 };
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: both pointers are valid and writable for the duration of each call.
    let ok = unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) == 0 && libc::clock_gettime(clock, &mut ts) == 0 };
    match ok {
        true => ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64,
        false => 0,
    }
}

/// Whether a thread of process `pid` is runnable or in an uninterruptible wait
/// (`/proc/<pid>/task/*/stat`, state `R` or `D`, proc(5)): a thread waiting for a CPU (the
/// machine is busy) or for its disk (a log line written while PostgreSQL syncs, a page fault)
/// uses none, yet it has not finished reacting.
fn any_runnable(pid: Option<u32>) -> bool {
    let Some(pid) = pid else { return false };
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        // `pid (comm) S …`: the state follows the last `)`.
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with(['R', 'D']))
    })
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    use super::waiting;
    use crate::sim::world::{Fd, Sockets};

    /// A connection not accepted yet, then bytes not read yet, keep the worker unsettled; once
    /// the proxy has accepted and read them, nothing waits.
    #[test]
    fn a_connection_not_accepted_or_bytes_not_read_are_waiting() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut sockets = Sockets { listening: vec![Fd::of(listener.as_raw_fd())], accepted: Default::default() };
        assert!(!waiting(&sockets), "nothing sent yet");
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert!(waiting(&sockets), "a connection in the backlog");
        let (mut accepted, _) = listener.accept().unwrap();
        sockets.accepted.insert(Fd::of(accepted.as_raw_fd()));
        assert!(!waiting(&sockets), "accepted, nothing sent on it");
        client.write_all(b"SELECT 1").unwrap();
        // Loopback delivers within the write; give a loaded machine a moment all the same.
        let start = std::time::Instant::now();
        while !waiting(&sockets) && start.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::yield_now();
        }
        assert!(waiting(&sockets), "bytes not read by the proxy");
        let mut buf = [0u8; 8];
        accepted.read_exact(&mut buf).unwrap();
        assert!(!waiting(&sockets), "every byte read");
        client.write_all(b"SELECT 2").unwrap();
        let fd = accepted.as_raw_fd();
        drop(accepted);
        // The descriptor numbered again for another socket with bytes waiting: not this one.
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _c = std::net::TcpStream::connect(other.local_addr().unwrap()).unwrap();
        assert!(!waiting(&sockets), "a closed connection (fd {fd}, now {}), or its number reused, is not waiting", other.as_raw_fd());
    }
}
