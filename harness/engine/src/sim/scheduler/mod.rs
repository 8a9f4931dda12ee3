//! The scheduler: applies a schedule's decisions to the fleet, one yield point at a time, and
//! records the history.
//!
//! After every decision it settles the world: it steps the simulation until every worker is
//! parked at a yield point, blocked in the server, waiting for work, or crashed. A worker is
//! blocked when `pg_blocking_pids` of its backend is not empty (PostgreSQL's isolationtester
//! does the same); no decision is ever taken on a sleep. Completed calls are collected in a
//! fixed order (the granted worker first, then by name), so the same schedule gives the same
//! history.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

mod blocked;
mod dead_letter;
mod drain;
mod hosts;
mod lifecycle;
mod nemesis;
mod network;
pub mod quiet;

pub use lifecycle::Setup;

use crate::namespace::admin::Admin;
use super::clock::Clock;
use crate::record::history::{Entry, Fact, FaultEvent, History, Service};
use super::world::{Mailbox, SharedWorld, Status};
use crate::schedule::Decision;
use crate::spec::{
    role_of, CrashPoint, Event, IdentityFn, Leftover, RoleKind, RoleSpec, WorkloadFault,
};

/// Steps one decision may take to reach a crash point.
const STEPS_TO_POINT_MAX: usize = 64;
/// Real time a worker may take for one call before the harness gives up, s.
const CALL_TIMEOUT_S: u64 = 60;

/// A decision that cannot apply in the current state (the worker is elsewhere, blocked,
/// crashed, or never reaches the crash point). Scripted schedules fail with it; generated ones
/// skip the decision ([`Run::lenient`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Inapplicable(pub String);

fn inapplicable(msg: String) -> anyhow::Error {
    anyhow::Error::new(Inapplicable(msg))
}

/// Simulation steps in a row without a worker changing state before the scheduler pauses
/// between steps. None: the step right after a grant runs at once, every further step with the
/// same workers moving waits first, since they then wait on a real service.
const IDLE_SPINS: u32 = 0;
/// The first pause between idle simulation steps, µs; each further idle step doubles it, up
/// to [`IDLE_PAUSE_MAX_US`]. A step ticks every host's runtime (an `epoll_wait` and a timer
/// wheel each: about 85 µs of CPU per step for a payout fleet in a debug build), and a worker
/// waiting on a real service waits 0.1 ms (Redis) to 1.5 ms (SQS): stepping again at once only
/// burns the CPU the services need. Measured (`crashpoint bench --jobs 1`, debug,
/// payout/explore): 4 immediate steps then 10 µs doubling to 200 µs took 900 steps and 123–133 ms
/// of harness CPU per schedule at 3.0–3.6 schedules/s; no immediate step and 100 µs doubling
/// to 400 µs, paused before a step rather than after it, took 345–370 steps and 70–86 ms at
/// 4.8–5.7 schedules/s.
const IDLE_PAUSE_US: u64 = 100;
/// The longest pause between idle simulation steps, µs.
const IDLE_PAUSE_MAX_US: u64 = 400;
/// The pause between steps while the scheduler only waits for concurrent processes to be
/// still ([`Run::wait_for_io`]), µs: a third of [`quiet::QUIET_MS`], so that about three
/// steps see a quiet window instead of about ten.
const QUIET_PAUSE_US: u64 = quiet::QUIET_MS * 1000 / 3;
/// The longest wait between steps while only in-process workers are moving, ms: their
/// replies wake the scheduler ([`crate::sim::io`]), so the bound only matters for a worker
/// that waits on something else, such as a row lock another worker holds (checked every
/// 2 ms, [`Run::detect_blocked`]). Measured (release `crashpoint bench`,
/// payout/explore): with 1 slot 221 steps and 34 ms of harness CPU per schedule, against 329
/// and 42 ms with the pauses alone; with 4 slots 313 steps against 535–597.
const WAKE_WAIT_MAX_MS: u64 = 2;

/// A schedule being run.
pub struct Run<'a> {
    sim: turmoil::Sim<'a>,
    /// The workers' PostgreSQL connections kept between the namespace's schedules.
    pg_kept: Rc<crate::namespace::worker_pg::Shelf>,
    /// The external worker processes kept between the namespace's schedules.
    processes: Rc<super::wire::keep::Shelf>,
    /// Raised when a host task is woken ([`crate::sim::io`]).
    wake: std::sync::Arc<crate::sim::io::Signal>,
    world: SharedWorld,
    admin: Admin,
    clock: Clock,
    workers: Vec<String>,
    roles: Vec<RoleSpec>,
    identity: Rc<IdentityFn>,
    faults: Vec<Box<dyn WorkloadFault>>,
    leftovers: Vec<Leftover>,
    retries_upstream: bool,
    events: Vec<Event>,
    keys: BTreeSet<String>,
    /// The history so far.
    pub history: History,
    /// Skip decisions that cannot apply (recording why) instead of failing.
    pub lenient: bool,
    polls: drain::Polls,
    /// Messages just deleted that `sqs:redeliver-after-delete` delivers once more:
    /// (label, queue, body).
    redeliveries: Vec<(String, &'static str, String)>,
    /// The role prefixes played by external worker processes.
    external_roles: Vec<&'static str>,
    /// Workers whose process may have several calls in flight ([`crate::sim::wire::External::concurrent`]).
    concurrent: Vec<String>,
    /// When those have finished reacting.
    quiet: quiet::Quiet,
    /// Real time a moving worker may take before the run fails: the external workers'
    /// `step_timeout_s`, else [`CALL_TIMEOUT_S`].
    step_timeout: Duration,
    /// The workload's providers.
    providers: Vec<Rc<dyn crate::provider::Provider>>,
    /// One-way cuts made for the calls in flight, repaired when they are over.
    cuts: Vec<crate::sim::net::Cut>,
    /// Simulation steps taken so far.
    steps: u64,
    /// Workers that fell behind (`c1:lag`, `c1:lag@recv`) and have not caught up in the drain
    /// yet, each with the call it waits before.
    lagging: BTreeMap<String, String>,
    /// The queues with a dead-letter queue, and their redrive policies.
    dead_letters: Vec<(&'static str, crate::spec::DeadLetter)>,
    /// Messages to move to a dead-letter queue at the next receive from their queue, in the
    /// order they became due.
    due_moves: Vec<dead_letter::DueMove>,
}

impl<'a> Run<'a> {

    fn status(&self, w: &str) -> Status {
        self.world.borrow_mut().mailbox(w).status.clone()
    }

    fn with_slot<T>(&self, w: &str, f: impl FnOnce(&mut Mailbox) -> T) -> T {
        f(self.world.borrow_mut().mailbox(w))
    }

    fn kind(&self, w: &str) -> Option<RoleKind> {
        role_of(&self.roles, w).map(|r| r.kind)
    }

    fn now(&self) -> u64 {
        self.clock.now_ms
    }

    fn check_worker(&self, w: &str) -> Result<()> {
        if !self.workers.iter().any(|x| x == w) {
            return Err(inapplicable(format!(
                "there is no worker `{w}` in this scenario (workers: {})",
                self.workers.join(" ")
            )));
        }
        Ok(())
    }

    /// The decisions that can apply now to `workers` for exhaustive enumeration, in a fixed
    /// order: a step for each worker parked in the middle of handling a message (not at its
    /// receive, not blocked), and, when `crash` is allowed, a crash for each worker standing at
    /// a crash point.
    pub fn choices(&self, workers: &[String], crash: bool) -> Vec<Decision> {
        let mut out = Vec::new();
        for w in workers {
            let Status::Parked { at, .. } = self.status(w) else {
                continue;
            };
            if !self.with_slot(w, |s| s.at_cycle_start) {
                out.push(Decision::Step {
                    worker: w.clone(),
                    op: None,
                });
            }
            if crash && at.is_some() {
                out.push(Decision::Crash {
                    worker: w.clone(),
                    at: None,
                });
            }
        }
        out
    }

    /// Applies one decision and settles. Errors: the decision cannot apply (the worker is at
    /// another call, blocked, crashed, or never reaches the crash point), or a host failed.
    pub fn apply(&mut self, d: &Decision) -> Result<()> {
        match self.apply_strict(d) {
            Err(e) if self.lenient && e.downcast_ref::<Inapplicable>().is_some() => {
                self.fault(
                    FaultEvent::Skipped {
                        decision: d.to_string(),
                        why: format!("{e}"),
                    },
                    vec![],
                );
                Ok(())
            }
            r => r,
        }
    }

    fn apply_strict(&mut self, d: &Decision) -> Result<()> {
        match d {
            Decision::Step { worker, op } => {
                self.check_worker(worker)?;
                self.skip_empty_receive(worker)?;
                self.step(worker, op.as_deref())
            }
            Decision::Crash { worker, at } => {
                self.check_worker(worker)?;
                if let Some(cp) = at {
                    if let Err(e) = self.run_to(worker, cp) {
                        return self.arm_instead(worker, cp, "crash", e);
                    }
                    self.aim(worker, cp);
                }
                self.crash(worker)
            }
            Decision::CrashApplied { worker, op } => {
                self.check_worker(worker)?;
                self.crash_applied(worker, op)
            }
            Decision::Fail { worker, at } => {
                self.check_worker(worker)?;
                if let Err(e) = self.run_to(worker, at) {
                    return self.arm_instead(worker, at, "fail", e);
                }
                self.with_slot(worker, |s| s.armed_failures.push(*at));
                self.step(worker, None)
            }
            Decision::Restart { worker } => {
                self.check_worker(worker)?;
                self.restart(worker)
            }
            Decision::Stop { worker } => {
                self.check_worker(worker)?;
                self.stop(worker)
            }
            Decision::Lag { worker, before } => {
                let named: Vec<String> = self.workers.iter().filter(|w| d.names(w)).cloned().collect();
                if named.is_empty() {
                    self.check_worker(worker)?;
                }
                for w in named {
                    if self.lagging.insert(w.clone(), before.clone()).as_ref() != Some(before) {
                        self.fault(FaultEvent::Lag { worker: w, before: before.clone() }, vec![]);
                    }
                }
                Ok(())
            }
            Decision::Tick { ms } => self.tick(*ms),
            Decision::Pause { ms } => self.pause(*ms),
            Decision::Fault(name) => self.workload_fault(name),
            Decision::Dispatch { event } => self.dispatch(event),
            Decision::RedisRestart => self.redis_restart(),
            Decision::Redis(fault) => {
                self.world.borrow_mut().redis.apply(*fault);
                let (name, text) = (fault.to_string(), fault.announcement().to_string());
                self.fault(FaultEvent::Redis { name, text }, vec![]);
                Ok(())
            }
            Decision::Net(fault) => self.net_fault(*fault),
            Decision::Pg(fault) => {
                self.world.borrow_mut().pg.apply(*fault);
                self.fault(
                    FaultEvent::Pg {
                        name: fault.to_string(),
                        text: fault.announcement().to_string(),
                    },
                    vec![],
                );
                Ok(())
            }
            Decision::Sqs(crate::nemesis::sqs::SqsFault::Redrive) => self.redrive(),
            Decision::Sqs(fault) => {
                self.world.borrow_mut().sqs.apply(*fault);
                self.fault(
                    FaultEvent::Sqs {
                        name: fault.to_string(),
                        text: fault.announcement().to_string(),
                    },
                    vec![],
                );
                Ok(())
            }
        }
    }

    fn step(&mut self, w: &str, expect: Option<&str>) -> Result<()> {
        let _span = tracing::debug_span!("step", worker = w).entered();
        match self.status(w) {
            Status::Parked { .. } if self.with_slot(w, |s| !s.units.is_empty()) => {
                return self.step_unit(w, expect)
            }
            Status::Parked { op, .. } => {
                if let Some(e) = expect {
                    if e != op {
                        return Err(inapplicable(format!("{w} is about to `{op}`, not `{e}`")));
                    }
                }
            }
            Status::Running { op, .. } => {
                let by = self
                    .with_slot(w, |s| s.blocked_by.clone())
                    .unwrap_or_default();
                return Err(inapplicable(format!(
                    "{w} is blocked in `{op}` by {}",
                    by.join(", ")
                )));
            }
            Status::Crashed => {
                return Err(inapplicable(format!(
                    "{w} is crashed; restart it first (`{w}:restart`)"
                )))
            }
            Status::Waiting { .. } => return Err(inapplicable(format!("{w} has nothing to do"))),
            Status::Starting => return Err(inapplicable(format!("{w} is still starting"))),
        }
        // SQS moves what is due to a dead-letter queue at this receive, which then does not get it.
        self.before_receive(w)?;
        let notify = self.with_slot(w, |s| {
            s.granted = true;
            if let Status::Parked { op, at } = s.status {
                // Moving from now on: settle waits until it parks again.
                s.status = Status::Running { op, at };
            }
            s.notify.clone()
        });
        notify.notify_one();
        self.settle(Some(w))
    }

    /// `pause:<ms>`: settles the world again and again until `ms` of real time have passed, so
    /// that the calls the workers' own timers make (a heartbeat) are held; the logical clock
    /// does not move.
    fn pause(&mut self, ms: u64) -> Result<()> {
        self.fault(FaultEvent::Pause { ms }, vec![]);
        let end = Instant::now() + Duration::from_millis(ms);
        while Instant::now() < end {
            self.settle(None)?;
            std::thread::sleep(Duration::from_millis(5).min(end.saturating_duration_since(Instant::now())));
        }
        self.settle(None)
    }

    /// Grants one held call of concurrent worker `w` ([`Mailbox::units`]): the first in their
    /// order, the first labelled `expect` (`c1:claim`), or the k-th for `expect = "#k"`
    /// (`c1/2`; past the last it wraps, so that a generated pick always applies).
    fn step_unit(&mut self, w: &str, expect: Option<&str>) -> Result<()> {
        let pick = self.with_slot(w, |s| {
            let ops = || {
                s.units
                    .iter()
                    .map(|u| format!("`{}`", u.op))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            match expect {
                None => Ok(0),
                Some(k) if k.starts_with('#') => {
                    let k: usize = k[1..].parse().unwrap_or(1);
                    Ok((k.max(1) - 1) % s.units.len())
                }
                Some(op) => s
                    .units
                    .iter()
                    .position(|u| u.op == op)
                    .ok_or_else(|| format!("{w} holds {}, not `{op}`", ops())),
            }
        });
        let i = pick.map_err(inapplicable)?;
        self.before_receive(w)?;
        let notify = self.with_slot(w, |s| {
            let u = &mut s.units[i];
            u.granted = true;
            let (op, notify) = (u.op, u.notify.clone());
            if let Status::Parked { at, .. } = s.status {
                s.status = Status::Running { op, at };
            }
            s.activity += 1;
            notify
        });
        notify.notify_one();
        self.settle(Some(w))
    }

    /// In a generated schedule ([`Run::lenient`]), refuses (inapplicable) to step a handler
    /// whose receive would find nothing ([`Run::receive_finds_nothing`]): an empty
    /// ReceiveMessage changes nothing in SQS or in the worker, so the schedule does not spend a
    /// call on it. Scripted schedules make every call they name.
    fn skip_empty_receive(&self, w: &str) -> Result<()> {
        match self.receive_finds_nothing(w).filter(|_| self.lenient) {
            Some(why) => Err(inapplicable(format!("{w}'s receive would find nothing: {why}"))),
            None => Ok(()),
        }
    }

    /// Steps `w` until it stands at crash point `cp`.
    fn run_to(&mut self, w: &str, cp: CrashPoint) -> Result<()> {
        self.run_until(w, &format!("crash point {cp}"), |s| s.stands_at(cp))
    }

    fn run_until(&mut self, w: &str, what: &str, done: impl Fn(&Mailbox) -> bool) -> Result<()> {
        // The change counter a poller saw at the end of its last idle cycle: a second idle
        // cycle with nothing changed in between would repeat the first forever.
        let mut idle_cycle_at: Option<u64> = None;
        for _ in 0..STEPS_TO_POINT_MAX {
            if self.with_slot(w, |s| done(s)) {
                return Ok(());
            }
            let before = self.status(w);
            self.skip_empty_receive(w)
                .and_then(|()| self.step(w, None))
                .map_err(|e| match e.downcast_ref::<Inapplicable>() {
                    Some(_) => inapplicable(format!("{w} cannot reach {what}: {e}")),
                    None => e,
                })?;
            let idle_again = self.with_slot(w, |s| s.idle) && self.status(w) == before;
            let cycle_over = self.with_slot(w, |s| {
                s.idle && s.at_cycle_start && matches!(s.status, Status::Parked { .. })
            });
            let mut same_cycle_again = false;
            if let Some(c) = self
                .kind(w)
                .and_then(|k| self.polls.counter(k))
                .filter(|_| cycle_over)
            {
                same_cycle_again = idle_cycle_at == Some(c);
                idle_cycle_at = Some(c);
            }
            if (idle_again || same_cycle_again) && !self.with_slot(w, |s| done(s)) {
                return Err(inapplicable(format!(
                    "{w} cannot reach {what}: it has nothing to do"
                )));
            }
        }
        Err(inapplicable(format!(
            "{w} did not reach {what} within {STEPS_TO_POINT_MAX} calls"
        )))
    }

    /// Records what the nemesis did, with ids in its text replaced by their labels.
    fn fault(&mut self, mut fault: FaultEvent, facts: Vec<Fact>) {
        {
            let mut w = self.world.borrow_mut();
            let mut relabel = |t: &mut String| *t = w.names.relabel_all(t);
            match &mut fault {
                FaultEvent::Skipped { why, .. } | FaultEvent::Armed { why, .. } => relabel(why),
                FaultEvent::LockExpired { key } | FaultEvent::KeyExpired { key } | FaultEvent::LockLost { key, .. } => {
                    relabel(key)
                }
                FaultEvent::Workload { text, .. } => relabel(text),
                FaultEvent::DrainPending { left } => relabel(left),
                _ => {}
            }
        }
        for f in &facts {
            self.apply_fact(f);
        }
        tracing::debug!(fault = ?fault, t_ms = self.now(), "fault");
        self.history.entries.push(Entry::Fault {
            t_ms: self.now(),
            fault,
            facts,
        });
    }

    /// Waits, before the next step, for a reply to one of `moving`'s calls: until a host task
    /// is woken ([`crate::sim::io::Signal`]), or at most [`WAKE_WAIT_MAX_MS`] when every
    /// moving worker is in-process (its sockets are on the I/O runtime, whose wakes reach
    /// this thread); else (an external worker's proxy, whose sockets only a step polls) the
    /// `idle`-th pause of [`IDLE_PAUSE_US`] doubling to [`IDLE_PAUSE_MAX_US`].
    ///
    /// When every moving worker is a concurrent process with nothing in flight, which the
    /// scheduler only waits to see still for [`quiet::QUIET_MS`], the pause is
    /// [`QUIET_PAUSE_US`]: a call it makes meanwhile is held at its proxy and seen at the next
    /// step, and the stillness is judged only after a step ([`quiet::Quiet::settled`]).
    fn wait_for_io(&self, moving: &[String], idle: u32) {
        let only_quiet = moving.iter().all(|w| {
            self.concurrent.contains(w)
                && self.with_slot(w, |s| {
                    s.pending == 0 && s.in_flight.is_empty() && !matches!(s.status, Status::Starting | Status::Running { .. })
                })
        });
        let max = match (only_quiet, moving.iter().any(|w| self.is_external(w))) {
            (true, _) => Duration::from_micros(QUIET_PAUSE_US),
            (false, false) => Duration::from_millis(WAKE_WAIT_MAX_MS),
            (false, true) => Duration::from_micros((IDLE_PAUSE_US << idle.min(16)).min(IDLE_PAUSE_MAX_US)),
        };
        self.wake.wait(max);
    }

    /// Steps the simulation until no worker is moving; then collects completed calls.
    fn settle(&mut self, granted: Option<&str>) -> Result<()> {
        let start = Instant::now();
        let mut last_check = Instant::now();
        let mut last_moving: Vec<String> = Vec::new();
        let mut spins = 0u32;
        self.world.borrow_mut().epoch += 1;
        loop {
            if self.end_exited()? {
                continue;
            }
            let mut moving: Vec<String> = {
                let w = self.world.borrow();
                w.mailboxes
                    .iter()
                    .filter(|(n, s)| {
                        let concurrent = self.concurrent.contains(n) && s.status != Status::Crashed;
                        // A concurrent worker's process may be about to make more calls.
                        let unsettled = concurrent
                            && (s.pending > 0
                                || s.in_flight.iter().any(|f| f.blocked_by.is_none()));
                        unsettled
                            || matches!(s.status, Status::Starting | Status::Running { .. })
                                && s.blocked_by.is_none()
                    })
                    .map(|(n, _)| n.clone())
                    .collect()
            };
            // The rest of the concurrent workers are still moving until their process is quiet.
            for name in self.concurrent.clone() {
                if !moving.contains(&name)
                    && self.status(&name) != Status::Crashed
                    && !self.quiet.settled(&name, &self.world)
                {
                    moving.push(name);
                }
            }
            moving.sort();
            if moving.is_empty() {
                if self.recheck_blocked()? {
                    continue;
                }
                break;
            }
            // While the same workers wait on real I/O, stepping again at once only burns the
            // CPU that PostgreSQL and LocalStack need: before each further step with the same
            // workers moving, wait for a reply ([`Run::wait_for_io`]; never after the step that
            // ends the settle).
            if moving == last_moving {
                spins += 1;
                // Only real I/O needs the wait: a call on the simulated network advances with
                // the steps alone, and its steps are not to wait for another worker's reply.
                let simulated = moving.iter().any(|w| self.with_slot(w, |s| s.in_net));
                if spins > IDLE_SPINS && !simulated {
                    self.wait_for_io(&moving, spins - IDLE_SPINS - 1);
                }
            } else {
                spins = 0;
                last_moving = moving.clone();
            }
            self.steps += 1;
            if let Err(e) = self.sim.step() {
                // A fatal condition (a worker requiring TLS) explains a host's failure best.
                bail!(
                    "{}",
                    self.fatal()
                        .unwrap_or_else(|| format!("a worker host failed: {e}"))
                );
            }
            self.make_cuts();
            if last_check.elapsed() >= Duration::from_millis(2) {
                self.detect_blocked(&moving)?;
                last_check = Instant::now();
            }
            if start.elapsed() > self.step_timeout {
                if let Some(w) = moving.iter().find(|w| self.bypasses_sqs(w)) {
                    bail!(
                        "worker bypassed the proxy: {w} made no progress for {} s and sent no request to its SQS proxy; \
                         point its SDK at AWS_ENDPOINT_URL_SQS",
                        self.step_timeout.as_secs()
                    );
                }
                let at: Vec<String> = moving
                    .iter()
                    .map(|w| match self.status(w) {
                        Status::Running { op, .. } => format!("{w} (its last call: `{op}`)"),
                        _ => format!("{w} (starting)"),
                    })
                    .collect();
                bail!(
                    "{} made no progress for {} s",
                    at.join(", "),
                    self.step_timeout.as_secs()
                );
            }
            if let Some(why) = self.fatal() {
                bail!("{why}");
            }
        }
        self.repair_cuts();
        self.collect(granted);
        self.redeliver()?;
        self.fire_armed_crashes()?;
        self.fire_stops()
    }

    /// Whether `w` is an external handler stuck talking to LocalStack directly.
    /// The evidence: it connected to PostgreSQL through its proxy, so it runs, yet it never
    /// asked its SQS proxy for anything.
    fn bypasses_sqs(&self, w: &str) -> bool {
        let handler =
            role_of(&self.roles, w).is_some_and(|r| matches!(r.kind, RoleKind::Handler { .. }));
        handler
            && self.is_external(w)
            && self.with_slot(w, |s| s.sqs_requests == 0 && !s.backend_pids.is_empty())
    }

    /// Why the run must stop, when a worker set a fatal condition ([`Mailbox::fatal`]).
    fn fatal(&self) -> Option<String> {
        self.world
            .borrow()
            .mailboxes
            .values()
            .find_map(|s| s.fatal.clone())
    }

    /// Whether the fleet has external worker processes (and so the schema `crashpoint_now()`).
    fn has_external(&self) -> bool {
        !self.external_roles.is_empty()
    }

    /// Whether `w` is an external worker process.
    fn is_external(&self, w: &str) -> bool {
        role_of(&self.roles, w).is_some_and(|r| self.external_roles.contains(&r.prefix))
    }

    /// Feeds a fact to the logical clock and to the drain's poll bookkeeping.
    fn apply_fact(&mut self, f: &Fact) {
        // The latest handle of a message its holder releases, before the clock forgets it.
        let released = match f {
            Fact::VisibilityChanged { msg, secs: 0, .. } => {
                self.clock.in_flight.get(msg).map(|i| i.receipt.clone())
            }
            _ => None,
        };
        self.clock.apply(f);
        match f {
            Fact::LockTaken { key, .. } | Fact::KeyWritten { key, .. } => {
                self.keys.insert(key.clone());
            }
            Fact::Sent { queue, msg, .. } => self.polls.message_visible(queue, msg),
            Fact::Received { queue, msg, .. } | Fact::Deleted { queue, msg } => {
                self.polls.message_taken(queue, msg);
                self.not_due(msg);
            }
            // Released (a graceful stop, a retry without delay): visible again at once.
            Fact::VisibilityChanged {
                queue,
                msg,
                secs: 0,
            } => {
                self.polls.message_visible(queue, msg);
                if let Some(receipt) = released {
                    self.visible_again(queue, msg, &receipt);
                }
            }
            Fact::VisibilityChanged { msg, .. } => self.not_due(msg),
            _ => {}
        }
    }

    fn collect(&mut self, granted: Option<&str>) {
        // What the providers did happened during the calls that complete now.
        self.collect_provider_log();
        let mut order: Vec<String> = granted.map(str::to_string).into_iter().collect();
        order.extend(
            self.workers
                .iter()
                .filter(|w| Some(w.as_str()) != granted)
                .cloned(),
        );
        for w in order {
            let (steps, notes) = self.with_slot(&w, |s| {
                s.completed_epochs.clear();
                (
                    std::mem::take(&mut s.completed),
                    std::mem::take(&mut s.notes),
                )
            });
            for mut step in steps {
                if let Some(unit) = &mut step.unit {
                    *unit = self.world.borrow_mut().names.relabel_all(unit);
                }
                if let crate::record::history::Outcome::Error { message } = &mut step.outcome {
                    *message = self.world.borrow_mut().names.relabel_all(message);
                }
                // An armed `redis:lose-lock` fired in this call: the loss first, then the call.
                for f in &step.facts {
                    if let Fact::LockLost { key } = f {
                        let by = step.worker.clone();
                        self.fault(FaultEvent::LockLost { key: key.clone(), by }, vec![]);
                    }
                }
                for f in &step.facts {
                    self.apply_fact(f);
                    // A FIFO queue delivers exactly once: no redelivery after a delete there.
                    if let Fact::Deleted { queue, msg } = f {
                        let fifo = self.admin.queues.is_fifo(queue);
                        if let Some((_, body)) = (!fifo)
                            .then(|| self.world.borrow_mut().sqs.take_redelivery(msg))
                            .flatten()
                        {
                            self.redeliveries.push((msg.clone(), *queue, body));
                        }
                    }
                }
                let busy = !self.with_slot(&w, |s| s.idle);
                // A failed statement may have ended its transaction too (pg:connection-reset).
                let failed_pg = step.service == Service::Postgres && step.outcome.failed();
                // A write that committed as it completed counts too, unless an idle poller made
                // it (a heartbeat after an empty claim would wake it again and again).
                let poller = self.kind(&w) == Some(RoleKind::Poller);
                let autocommit = step.facts.contains(&Fact::AutocommitWrite) && (busy || !poller);
                if busy && (step.op == "commit" || step.op == "rollback" || failed_pg) || autocommit {
                    self.polls.db_changed();
                }
                tracing::debug!(worker = %step.worker, op = %step.op, at = ?step.at, outcome = ?step.outcome, t_ms = step.t_ms, "step");
                self.history.entries.push(Entry::Step(step));
            }
            for text in notes {
                let text = self.world.borrow_mut().names.relabel_all(&text);
                self.history.entries.push(Entry::Note {
                    t_ms: self.now(),
                    worker: w.clone(),
                    text,
                });
            }
        }
    }
}

/// Whether a worker is back at its receive: parked at the first call of a new cycle.
fn back_at_receive(s: &crate::sim::world::Mailbox) -> bool {
    s.at_cycle_start && matches!(s.status, Status::Parked { .. })
}
