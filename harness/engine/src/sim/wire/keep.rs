//! External worker processes kept between the schedules of one namespace (a role declared
//! `reuse = true`), so that a schedule need not pay a runtime's start.
//!
//! A worker's host listens on three loopback ports ([`Listeners`]). At a schedule's end, a
//! reusable role's process that is still running is left, with its listening sockets, on the
//! [`Shelf`]; the namespace keeps it ([`crate::namespace::admin::Admin`]), and a schedule that
//! ends otherwise than quiescent drops the namespace and kills it. Every connection the process
//! had to the proxies closes with the schedule's hosts: its pools see their connections reset
//! and reconnect, and those connections wait in the listening sockets' backlog until the next
//! schedule of the namespace serves them. That schedule's host of the same worker name, command,
//! variant and configuration takes the process instead of starting one: its calls are then held
//! as a started process's are. Its schema, queues and Redis keys are the namespace's own and
//! were reset in between ([`crate::namespace::pool`]).
//!
//! Only generated cases of an exploration take kept processes, inside [`reusing`]; a failure
//! found on them is run again on fresh processes before it is reported, and a shrink, a repro
//! and the second run of `--check-determinism` start fresh processes.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;

use anyhow::{Context, Result};

use super::process::WorkerProcess;

/// An external worker's listening sockets: its three proxies' (PostgreSQL, SQS, Redis) and one
/// per provider of the workload ([`super::http`]), on loopback ports the kernel chose, and the
/// ports its process serves webhooks on ([`super::webhook`]). They outlive a schedule's host
/// when its process is kept.
pub struct Listeners {
    /// PostgreSQL's proxy.
    pub pg: std::net::TcpListener,
    /// SQS's proxy.
    pub sqs: std::net::TcpListener,
    /// Redis's proxy.
    pub redis: std::net::TcpListener,
    /// The providers', in the workload's order.
    pub providers: Vec<std::net::TcpListener>,
    /// The loopback ports the process listens on for its role's webhooks
    /// ([`super::webhook::port_envs`] order): free when chosen, the process's to bind.
    pub hooks: Vec<u16>,
}

/// A socket listening on `127.0.0.1:0`, non-blocking.
fn listen() -> Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding a proxy's loopback port")?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// A tokio listener on a duplicate of `l`, for the current runtime.
fn dup(l: &std::net::TcpListener) -> Result<tokio::net::TcpListener> {
    Ok(tokio::net::TcpListener::from_std(l.try_clone()?)?)
}

impl Listeners {
    /// Three sockets and `providers` more listening on `127.0.0.1:0`, non-blocking, and `hooks`
    /// free loopback ports for the process's webhook endpoints. Errors: a socket that cannot be
    /// bound.
    pub fn bind(providers: usize, hooks: usize) -> Result<Listeners> {
        // A port the kernel chose, then released for the process to bind.
        let free = || -> Result<u16> { Ok(listen()?.local_addr()?.port()) };
        Ok(Listeners {
            pg: listen()?,
            sqs: listen()?,
            redis: listen()?,
            providers: (0..providers).map(|_| listen()).collect::<Result<_>>()?,
            hooks: (0..hooks).map(|_| free()).collect::<Result<_>>()?,
        })
    }

    /// Their ports: (PostgreSQL, SQS, Redis).
    pub fn ports(&self) -> Result<(u16, u16, u16)> {
        Ok((self.pg.local_addr()?.port(), self.sqs.local_addr()?.port(), self.redis.local_addr()?.port()))
    }

    /// The providers' ports, in order.
    pub fn provider_ports(&self) -> Result<Vec<u16>> {
        self.providers.iter().map(|l| Ok(l.local_addr()?.port())).collect()
    }

    /// Tokio listeners on duplicates of the sockets, for the current runtime (a turmoil host's):
    /// dropping them with the runtime leaves these listening. The three proxies', then the
    /// providers'. Errors: a descriptor that cannot be duplicated or registered.
    pub fn for_runtime(&self) -> Result<([tokio::net::TcpListener; 3], Vec<tokio::net::TcpListener>)> {
        Ok(([dup(&self.pg)?, dup(&self.sqs)?, dup(&self.redis)?], self.providers.iter().map(dup).collect::<Result<_>>()?))
    }
}

/// A worker process with its listening sockets, kept for the namespace's next schedule.
pub struct Kept {
    /// What it serves: [`Kept::key`] of its worker name and start.
    key: String,
    /// Its role (`c`).
    pub role: &'static str,
    /// The process (killed when this is dropped).
    pub process: WorkerProcess,
    /// Where its proxies listen (the process's environment names these ports).
    pub listeners: Listeners,
}

impl Kept {
    /// A process started as `key` says ([`Kept::key`]), of role `role`.
    pub fn new(key: String, role: &'static str, process: WorkerProcess, listeners: Listeners) -> Kept {
        Kept { key, role, process, listeners }
    }

    /// What a process must have been started as to serve worker `name` now: its name, command
    /// line, working directory and environment `env` (as it would be started, its proxies'
    /// ports left out: the kept listeners keep theirs; `DATABASE_URL` carries the namespace's
    /// search_path). A process serves only a schedule that would have started the same.
    pub fn key(name: &str, command: &[String], cwd: &std::path::Path, env: &[(String, String)]) -> String {
        format!("{name}\u{0}{command:?}\u{0}{}\u{0}{env:?}", cwd.display())
    }
}

thread_local! {
    /// Whether the schedules this thread runs now may take kept processes ([`reusing`]).
    static REUSING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` (a generated case of an exploration) with kept processes served to its schedule's
/// hosts; outside it, every schedule starts its processes afresh and kills those kept.
pub fn reusing<T>(f: impl FnOnce() -> T) -> T {
    struct Back(bool);
    impl Drop for Back {
        fn drop(&mut self) {
            REUSING.with(|r| r.set(self.0));
        }
    }
    let _back = Back(REUSING.with(|r| r.replace(true)));
    f()
}

/// One schedule's external processes: those kept from the namespace's schedule before, taken
/// by its hosts as they start ([`Shelf::take`]); and, from [`Shelf::collect`] on (the
/// schedule's end), those its hosts leave running ([`Shelf::leave`]).
#[derive(Default)]
pub struct Shelf {
    kept: RefCell<Vec<Kept>>,
    collecting: Cell<bool>,
    left: RefCell<Vec<Kept>>,
    /// The roles whose processes were taken from the shelf in this schedule.
    reused: RefCell<BTreeSet<&'static str>>,
}

impl Shelf {
    /// A shelf holding `kept` when this thread runs inside [`reusing`]; else the kept
    /// processes are killed now, and every host starts its own.
    pub fn new(kept: Vec<Kept>) -> Shelf {
        let kept = match REUSING.with(Cell::get) {
            true => kept,
            false => Vec::new(),
        };
        Shelf { kept: RefCell::new(kept), ..Shelf::default() }
    }

    /// The kept process started as `key`, if there is one.
    pub fn take(&self, key: &str) -> Option<Kept> {
        let mut kept = self.kept.borrow_mut();
        let at = kept.iter().position(|k| k.key == key)?;
        let k = kept.remove(at);
        self.reused.borrow_mut().insert(k.role);
        Some(k)
    }

    /// From now on, processes left with [`Shelf::leave`] are kept (the schedule ends).
    pub fn collect(&self) {
        self.collecting.set(true);
    }

    /// A host stops with its process still running: it is kept if the schedule is ending
    /// ([`Shelf::collect`]), else killed (a crash).
    pub fn leave(&self, k: Kept) {
        if self.collecting.get() {
            self.left.borrow_mut().push(k);
        }
    }

    /// The processes left at the schedule's end, for the namespace; those kept before and not
    /// taken are killed.
    pub fn drain(&self) -> Vec<Kept> {
        self.kept.borrow_mut().clear();
        std::mem::take(&mut *self.left.borrow_mut())
    }

    /// The roles whose processes this schedule took from the shelf.
    pub fn reused(&self) -> BTreeSet<&'static str> {
        self.reused.borrow().clone()
    }
}
