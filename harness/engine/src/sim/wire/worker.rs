//! One external worker as the scheduler sees it: the gate its three proxies share.
//!
//! Every gated call parks the worker in its slot of the shared world exactly as an
//! in-process call does (the same `park` as [`crate::sim::cx::Cx`]); when the reply has reached the process,
//! the call becomes a [`Step`] with its [`Outcome`] and [`Fact`]s, and the worker stands at the
//! crash point after that call until its next request is held. The PostgreSQL side of the gate
//! (which statements are calls, their labels and outcomes) is [`super::pg::calls`].

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

use super::external::External;
use crate::namespace::queues::QueueUrls;
use crate::record::history::{Fact, Outcome, Service, Step};
use crate::sim::world::{InFlight, SharedWorld, Status, Unit};
use crate::spec::{CrashPoint, IdentityFn};

/// The gate of one external worker.
pub struct WireWorker {
    /// Its name (`c1`).
    pub me: String,
    /// The state shared with the scheduler.
    pub world: SharedWorld,
    /// Its role's declaration.
    pub ext: std::sync::Arc<External>,
    /// The queue its role receives from (a handler), for idle detection.
    pub queue: Option<&'static str>,
    /// The schedule's queues (real URLs).
    pub queues: QueueUrls,
    /// The workload's message identity of a body.
    pub identity: Rc<IdentityFn>,
    at: Cell<Option<CrashPoint>>,
    /// The call held at the gate now, if any (one-call-at-a-time mode).
    holding: Cell<Option<&'static str>>,
    /// The calls held or in flight, by the proxy task that made them (a proxy connection
    /// makes its calls one after another): label, how it was granted, unit and grant settle.
    current: RefCell<HashMap<Option<tokio::task::Id>, Current>>,
    /// Receipt handles it received, to the message's (queue, label).
    receipts: RefCell<BTreeMap<String, (&'static str, String)>>,
    /// The client libraries its connections named (Redis `CLIENT SETINFO lib-name`, the SQS
    /// user agent, PostgreSQL `application_name`), for errors.
    clients: RefCell<BTreeSet<String>>,
    /// The last unit number handed out.
    units: Cell<u64>,
    /// Calls held so far ([`WireWorker::calls_held`]).
    held: Cell<u64>,
    /// Where in [`Mailbox::completed`] the call completed last went (for [`WireWorker::set_idle`]).
    last_completed: Cell<Option<usize>>,
    /// The settle of a concurrent worker's first completion in it, and the crash point it
    /// stood at before that settle.
    settle_at: Cell<Option<(u64, Option<CrashPoint>)>>,
    /// Its process, once started: where the CPU of its start goes, its pid and its start
    /// ([`super::process::WorkerProcess::record_first_call`]).
    process: RefCell<Option<super::process::StartProbe>>,
    /// The webhook delivery crashpoint holds for the process while it waits for one (its label;
    /// [`super::webhook`]): a call the process makes meanwhile is one outside a delivery.
    delivery_wait: Cell<Option<&'static str>>,
}

/// An ungated exchange under way ([`WireWorker::pending_guard`]).
pub struct PendingGuard<'a>(&'a WireWorker);

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.0.pending(false);
    }
}

/// A call one proxy task of the worker has held or has in flight.
#[derive(Debug, Clone)]
struct Current {
    op: &'static str,
    granted: Granted,
    /// Its [`Unit::id`] (a concurrent worker's call).
    unit: Option<u64>,
    /// The settle it was granted in: calls completing in one settle are traced newest grant first.
    epoch: u64,
    /// What it is about, for the trace ([`Step::unit`]).
    about: Option<String>,
}

/// One call as a proxy presents it to the gate.
#[derive(Debug, Clone)]
pub struct Held {
    /// Its label (`claim`, `recv`).
    pub op: &'static str,
    /// The service it goes to.
    pub service: Service,
    /// Whether it is a receive from the worker's own queue (the top of a consumer's loop).
    pub cycle_start: bool,
    /// What tells it apart from other calls whatever their arrival order ([`Unit::key`]).
    pub key: String,
    /// Its PostgreSQL backend pid (`None`: SQS, Redis).
    pub pid: Option<i32>,
    /// What it is about, for the trace of a concurrent worker ([`Step::unit`]): the first bound
    /// parameter of its transaction's first held statement, the message it names, the key.
    pub about: Option<String>,
    /// Between held calls of the same [`Held::key`], the lower goes first ([`PgCall::opened`]; 0
    /// for SQS and Redis).
    pub tie: u64,
}

impl WireWorker {
    /// A gate for worker `me`.
    pub fn new(
        me: String,
        world: SharedWorld,
        ext: std::sync::Arc<External>,
        queue: Option<&'static str>,
        queues: QueueUrls,
        identity: Rc<IdentityFn>,
    ) -> WireWorker {
        WireWorker {
            me,
            world,
            ext,
            queue,
            queues,
            identity,
            at: Cell::new(None),
            holding: Cell::new(None),
            current: RefCell::new(HashMap::new()),
            receipts: RefCell::new(BTreeMap::new()),
            clients: RefCell::new(BTreeSet::new()),
            units: Cell::new(0),
            held: Cell::new(0),
            last_completed: Cell::new(None),
            settle_at: Cell::new(None),
            process: RefCell::new(None),
            delivery_wait: Cell::new(None),
        }
    }

    /// Marks that crashpoint now holds webhook delivery `label` for the process, waiting for one
    /// (`None`: it no longer waits), for the error a call of the process's own meanwhile gets.
    pub fn waiting_for_delivery(&self, label: Option<&'static str>) {
        self.delivery_wait.set(label);
    }

    /// Names its process, started now: its first call then records what its start cost.
    pub fn started(&self, p: &super::process::WorkerProcess) {
        *self.process.borrow_mut() = Some(p.start_probe());
    }

    /// Records a client library the wire named (`ioredis 5.4.1`), for errors.
    pub fn saw_client(&self, what: String) {
        self.clients.borrow_mut().insert(what);
    }

    /// Watches `socket`, a connection one of its proxies accepted, until the returned guard
    /// drops (the connection's task ends): see [`crate::sim::world::Sockets`].
    pub fn watch(&self, socket: &impl std::os::fd::AsRawFd) -> crate::sim::world::Watched {
        crate::sim::world::Watched::new(self.world.clone(), self.me.clone(), socket.as_raw_fd())
    }

    /// Its host started with these listening sockets (its proxies' and its providers'): they
    /// are watched from now on, and the connections an earlier host of it accepted are gone.
    pub fn listening(&self, fds: Vec<i32>) {
        let mut w = self.world.borrow_mut();
        let listening = fds.into_iter().map(crate::sim::world::Fd::of).collect();
        w.mailbox(&self.me).sockets = crate::sim::world::Sockets { listening, accepted: Default::default() };
    }

    /// Counts a wire event of the process (bytes read or written by a proxy), so that the
    /// scheduler waits for the process to settle ([`Mailbox::activity`]).
    pub fn touch(&self) {
        if self.ext.concurrent {
            if let Ok(mut w) = self.world.try_borrow_mut() {
                w.mailbox(&self.me).activity += 1;
            }
        }
    }

    /// Marks an ungated exchange under way (`true`) or over: while one is, a concurrent
    /// worker's process counts as moving ([`Mailbox::pending`]).
    pub fn pending(&self, on: bool) {
        if self.ext.concurrent {
            if let Ok(mut w) = self.world.try_borrow_mut() {
                let s = w.mailbox(&self.me);
                s.activity += 1;
                s.pending = if on {
                    s.pending + 1
                } else {
                    s.pending.saturating_sub(1)
                };
            }
        }
    }

    /// [`WireWorker::pending`] from now until the guard is dropped.
    pub fn pending_guard(&self) -> PendingGuard<'_> {
        self.pending(true);
        PendingGuard(self)
    }

    /// The proxy task that made calls ended (its connection closed): a call of it still in
    /// flight will never complete.
    pub fn task_ended(&self) {
        let Some(cur) = self.current.borrow_mut().remove(&tokio::task::try_id()) else {
            return;
        };
        if let Some(id) = cur.unit {
            if let Ok(mut w) = self.world.try_borrow_mut() {
                let at = self.at.get();
                let s = w.mailbox(&self.me);
                s.in_flight.retain(|f| f.id != id);
                s.activity += 1;
                s.summarize(at);
            }
        }
    }

    /// Parks the worker before `call` until the scheduler grants it. Returns how it was granted.
    pub async fn hold(&self, call: Held) -> Granted {
        self.world.borrow_mut().mailbox(&self.me).made_calls = true;
        self.held.set(self.held.get() + 1);
        if let Some(probe) = &*self.process.borrow() {
            probe.first_call();
        }
        if self.ext.concurrent {
            return self.hold_unit(call).await;
        }
        let Held {
            op,
            service,
            cycle_start,
            ..
        } = call;
        if let Some(other) = self.holding.replace(Some(op)) {
            self.fatal(self.one_at_a_time(op, other, "was held"));
        } else if let Some(other) = self.in_flight_elsewhere() {
            self.fatal(self.one_at_a_time(op, other, "was in flight, its reply not back yet"));
        }
        if cycle_start {
            self.world.borrow_mut().mailbox(&self.me).at_cycle_start = true;
        }
        let mut guard = Abandoned {
            world: &self.world,
            me: &self.me,
            op,
            at: self.at.get(),
            holding: &self.holding,
            armed: true,
        };
        let failed = crate::sim::gate::park(&self.world, &self.me, op, self.at.get()).await;
        guard.armed = false;
        self.holding.set(None);
        let granted = self.granted(failed, service);
        self.current.borrow_mut().insert(
            tokio::task::try_id(),
            Current {
                op,
                granted,
                unit: None,
                epoch: 0,
                about: None,
            },
        );
        granted
    }

    /// A call of this one-call-at-a-time worker that another proxy task (another connection)
    /// was granted and has not completed: its label. A call completes before its reply reaches
    /// the worker (each proxy records the outcome, then answers), so a worker that awaits each
    /// call never has one here when it makes the next; a crash drops the whole host, and with
    /// it these records.
    fn in_flight_elsewhere(&self) -> Option<&'static str> {
        let me = tokio::task::try_id();
        self.current
            .borrow()
            .iter()
            .find(|(task, _)| **task != me)
            .map(|(_, c)| c.op)
    }

    /// The error for a second call of a one-call-at-a-time worker: the calls (`how`: what the
    /// other one was doing, held at the gate or in flight), the client libraries the wire
    /// named, and the settings that change it.
    fn one_at_a_time(&self, op: &str, other: &str, how: &str) -> String {
        let clients = self.clients.borrow();
        let libs = match clients.is_empty() {
            true => String::new(),
            false => format!(
                " (its clients: {})",
                clients.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
        };
        let origin = self
            .ext
            .origin
            .clone()
            .unwrap_or_else(|| format!("[external.{}]", self.ext.role));
        if let Some(delivery) = self.delivery_wait.get().filter(|d| *d == other || *d == op) {
            let own = if delivery == op { other } else { op };
            return format!(
                "{}: `{own}` was sent while the endpoint waited for a webhook delivery (`{delivery}`){libs}: an endpoint's process makes \
                 its calls inside a delivery, between the POST and its answer, one at a time. A call of its own once it listens (a \
                 query at start after `listen`, a timer) needs `concurrent = true` in {origin}; or make it before the process \
                 listens on its port",
                self.me
            );
        }
        format!(
            "{}: `{op}` was sent while `{other}` {how}{libs}: this worker is declared to make one call at a time. \
             Set `concurrent = true` in {origin} to test it with several calls in flight (a batch handled in parallel, a \
             heartbeat, a pool's connections), or make the worker sequential (sqs-consumer `batchSize: 1` and no \
             `heartbeatInterval`, one connection, each call awaited in turn)",
            self.me
        )
    }

    /// How a call parked and granted goes: failed at an armed crash point, withheld, or on.
    fn granted(&self, failed: Option<CrashPoint>, service: Service) -> Granted {
        let mut w = self.world.borrow_mut();
        let withhold = std::mem::take(&mut w.mailbox(&self.me).withhold);
        let granted = match failed {
            Some(cp) => Granted::Fail(cp),
            None if withhold => Granted::Withhold,
            None => Granted::Go,
        };
        w.calls.add(service);
        w.mailbox(&self.me).in_pg = service == Service::Postgres && failed.is_none();
        granted
    }

    /// A concurrent worker's call: held as one of its [`Mailbox::units`] until the scheduler
    /// grants that unit, then in flight until its reply.
    async fn hold_unit(&self, call: Held) -> Granted {
        let Held {
            op,
            service,
            cycle_start,
            key,
            pid,
            about,
            tie,
        } = call;
        // A trace line's subject is one readable line, whatever the call carried, with its ids
        // as labels before it is cut (a cut id would no longer be known).
        let about = about.map(|a| {
            let a = self.world.borrow_mut().names.relabel_all(&a);
            crate::record::trace::one_line(&a, crate::record::trace::SUBJECT_MAX)
        });
        let task = tokio::task::try_id();
        // A proxy task makes its calls in turn: a call it made before is over.
        if let Some(prev) = self.current.borrow_mut().remove(&task).and_then(|c| c.unit) {
            self.world
                .borrow_mut()
                .mailbox(&self.me)
                .in_flight
                .retain(|f| f.id != prev);
        }
        let id = self.units.get() + 1;
        self.units.set(id);
        let notify = Rc::new(tokio::sync::Notify::new());
        {
            let mut w = self.world.borrow_mut();
            // Ids differ from run to run (message ids, the scenario's UUIDs): their labels do not.
            let key = w.names.relabel_all(&key);
            let epoch = w.epoch;
            let at = self.at.get();
            let s = w.mailbox(&self.me);
            tracing::debug!(worker = %self.me, id, op, epoch, key = %key, "concurrent call held");
            let unit = Unit {
                id,
                op,
                key,
                epoch,
                tie,
                cycle_start,
                granted: false,
                notify: notify.clone(),
            };
            let i = s.units.partition_point(|u| {
                (u.epoch, &u.key, u.tie, u.id) < (unit.epoch, &unit.key, unit.tie, unit.id)
            });
            s.units.insert(i, unit);
            s.activity += 1;
            s.summarize(at);
        }
        let mut guard = UnitGuard {
            worker: self,
            id,
            armed: true,
        };
        loop {
            {
                let mut w = self.world.borrow_mut();
                let s = w.mailbox(&self.me);
                if let Some(i) = s.units.iter().position(|u| u.id == id && u.granted) {
                    s.units.remove(i);
                    break;
                }
            }
            notify.notified().await;
        }
        guard.armed = false;
        let (failed, epoch) = {
            let mut w = self.world.borrow_mut();
            let epoch = w.epoch;
            let at = self.at.get();
            let s = w.mailbox(&self.me);
            s.in_flight.push(InFlight {
                id,
                op,
                pid: pid.filter(|_| service == Service::Postgres),
                blocked_by: None,
            });
            s.activity += 1;
            let failed = s.take_armed_failure(at);
            s.summarize(at);
            (failed, epoch)
        };
        let granted = self.granted(failed, service);
        self.current.borrow_mut().insert(
            task,
            Current {
                op,
                granted,
                unit: Some(id),
                epoch,
                about,
            },
        );
        granted
    }

    /// How many calls it has presented to be held so far: a request that comes with this
    /// unchanged is no new call of the worker's code (an HTTP client's own retry,
    /// [`super::http`]).
    pub fn calls_held(&self) -> u64 {
        self.held.get()
    }

    /// Starts a call that passes without a hold (an SDK retry of a granted call): it is
    /// counted and recorded like any call, and decides nothing.
    pub fn ungated(&self, op: &'static str, service: Service) {
        self.world.borrow_mut().calls.add(service);
        let mut cur = self.current.borrow_mut();
        let prev = cur.get(&tokio::task::try_id()).cloned();
        let epoch = prev.as_ref().map_or(0, |c| c.epoch);
        let about = prev.as_ref().and_then(|c| c.about.clone());
        cur.insert(
            tokio::task::try_id(),
            Current {
                op,
                granted: Granted::Go,
                unit: prev.and_then(|c| c.unit),
                epoch,
                about,
            },
        );
    }

    /// The call this proxy task made last completed with `outcome` and `facts`: records its
    /// step; the worker now stands at the crash point after it.
    pub fn complete(&self, service: Service, outcome: Outcome, facts: Vec<Fact>) {
        let Some(Current {
            op,
            granted,
            unit: unit_id,
            epoch,
            about,
        }) = self.current.borrow_mut().remove(&tokio::task::try_id())
        else {
            return;
        };
        let unit = about;
        let (service, outcome) = match granted {
            Granted::Fail(at) => (Service::None, Outcome::ServiceErrorInjected { at }),
            _ => (service, outcome),
        };
        let at = self.at.replace(self.point_reached(op, &outcome));
        let mut w = self.world.borrow_mut();
        if unit_id.is_some() && self.settle_at.get().is_none_or(|(e, _)| e != w.epoch) {
            self.settle_at.set(Some((w.epoch, at)));
        }
        let t_ms = w.now_ms;
        let slot = w.mailbox(&self.me);
        slot.in_pg = false;
        // The boundary after a call stands only where the call did something: after a poll that
        // found nothing (or a call that failed) a crash or failure aimed at `after_<call>` waits
        // for the next one that did, instead of landing on the next idle poll.
        slot.last_call = self.point_reached_by(op, &outcome).then_some(op);
        // A role without declared crash points stands at the boundary after each call that
        // reached one: counted as passed there, for the coverage table.
        let passed = self.at.get().or_else(|| {
            let boundary = self.ext.points.is_empty() && self.point_reached_by(op, &outcome);
            boundary.then(|| crate::spec::after_call(op))
        });
        if let Some(cp) = passed {
            slot.passed.push(cp);
        }
        let step = Step {
            t_ms,
            worker: self.me.clone(),
            op: op.to_string(),
            service,
            at,
            outcome,
            idle: false,
            facts,
            unit,
        };
        match unit_id {
            None => {
                slot.completed = vec![step];
                self.last_completed.set(Some(0));
            }
            Some(id) => {
                // Calls that complete in one settle: the one granted last first (it freed the
                // others, blocked on its locks), whatever order their replies came in.
                slot.in_flight.retain(|f| f.id != id);
                slot.activity += 1;
                slot.completed_epochs.resize(slot.completed.len(), 0);
                let i = slot.completed_epochs.partition_point(|e| *e >= epoch);
                slot.completed.insert(i, step);
                slot.completed_epochs.insert(i, epoch);
                self.last_completed.set(Some(i));
                // Calls that complete in one settle stand where they would in the order the
                // trace gives them, whatever order their replies came in.
                let mut cur = self.settle_at.get().and_then(|(_, at)| at);
                for st in slot.completed.iter_mut() {
                    st.at = cur;
                    cur = self.point_reached(&st.op, &st.outcome);
                }
                self.at.set(cur);
                let at = self.at.get();
                slot.summarize(at);
            }
        }
        if granted == Granted::Withhold && service == Service::Postgres {
            // It will never move again: the scheduler kills it now.
            slot.status = Status::Waiting { at: self.at.get() };
            slot.notes.push(format!("the reply to `{op}` is withheld: applied, and the worker dies before it hears of it"));
        }
    }

    /// The crash point the worker stands at after call `op` answered `outcome`. As in-process:
    /// a crash point is reached only by a call that succeeded, and the one after a receive only
    /// when a message came (an idle poll stands nowhere); a poller's poll that found no row is
    /// an idle poll too.
    fn point_reached(&self, op: &str, outcome: &Outcome) -> Option<CrashPoint> {
        self.point_reached_by(op, outcome).then(|| self.ext.point_after(op)).flatten()
    }

    /// Whether call `op`, answered `outcome`, reached the point after it: it succeeded and was
    /// no idle poll.
    fn point_reached_by(&self, op: &str, outcome: &Outcome) -> bool {
        let idle = matches!(outcome, Outcome::Empty) || outcome.receive_lost() || self.ext.poll == Some(op) && outcome.no_rows();
        !outcome.failed() && !idle
    }

    /// The label of the call this proxy task has held or in flight.
    pub fn current_op(&self) -> Option<&'static str> {
        self.current
            .borrow()
            .get(&tokio::task::try_id())
            .map(|c| c.op)
    }

    /// Marks the worker idle (its receive found nothing) or busy.
    pub fn set_idle(&self, idle: bool) {
        let mut w = self.world.borrow_mut();
        let slot = w.mailbox(&self.me);
        slot.idle = idle;
        if let Some(step) = self
            .last_completed
            .get()
            .and_then(|i| slot.completed.get_mut(i))
        {
            step.idle = idle;
        }
    }

    /// Ends the run: something about the worker cannot be relayed (exit 2, naming it).
    pub fn fatal(&self, why: String) {
        let mut w = self.world.borrow_mut();
        w.mailbox(&self.me).fatal.get_or_insert(why);
    }

    /// Adds a line to the trace.
    pub fn note(&self, text: String) {
        self.world.borrow_mut().mailbox(&self.me).notes.push(text);
    }

    /// Remembers that `receipt` belongs to message `msg` of `queue`.
    pub fn remember_receipt(&self, receipt: &str, queue: &'static str, msg: &str) {
        self.receipts
            .borrow_mut()
            .insert(receipt.to_string(), (queue, msg.to_string()));
    }

    /// The (queue, label) of the message a receipt handle belongs to.
    pub fn message_of(&self, receipt: &str) -> Option<(&'static str, String)> {
        self.receipts.borrow().get(receipt).cloned()
    }

    /// The declared name of the queue whose URL (real or through the proxy) ends like `url`.
    pub fn queue_of_url(&self, url: &str) -> Option<&'static str> {
        let last = url.rsplit('/').next()?;
        self.queues
            .queues
            .iter()
            .find(|(_, u, _)| u.rsplit('/').next() == Some(last))
            .map(|(n, _, _)| *n)
    }
}

/// The text of the service error a proxy answers call `op` with for a failure injected at
/// `cp` (the same in every protocol, so that a worker's logs name the call it hit and the
/// fault: `crashpoint: service error injected on recv (fail@after_lock)`).
pub fn injected_error(op: &str, cp: CrashPoint) -> String {
    format!("crashpoint: service error injected on {op} (fail@{cp})")
}

/// How the scheduler let a held call go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granted {
    /// Forward it.
    Go,
    /// Answer it with a service error: the failure armed at this crash point (`fail@point`).
    Fail(CrashPoint),
    /// Forward it, but withhold the reply (PostgreSQL only; the other proxies relay it, and
    /// the worker is killed before its next call either way).
    Withhold,
}

/// Takes a concurrent worker's held call out of its units when the proxy drops the hold (the
/// client went away): it is never forwarded.
struct UnitGuard<'a> {
    worker: &'a WireWorker,
    id: u64,
    armed: bool,
}

impl Drop for UnitGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(mut w) = self.worker.world.try_borrow_mut() {
            let at = self.worker.at.get();
            let s = w.mailbox(&self.worker.me);
            if let Some(i) = s.units.iter().position(|u| u.id == self.id) {
                let op = s.units.remove(i).op;
                s.notes.push(format!(
                    "`{op}` abandoned: the worker's connection went away while it was held"
                ));
            }
            s.activity += 1;
            s.summarize(at);
        }
    }
}

/// Un-parks a worker whose held call was abandoned (the proxy dropped the hold because the
/// client went away): the call is never forwarded, and the worker counts as moving again, so
/// a later grant cannot fall to its next call.
struct Abandoned<'a> {
    world: &'a SharedWorld,
    me: &'a str,
    op: &'static str,
    at: Option<CrashPoint>,
    holding: &'a Cell<Option<&'static str>>,
    armed: bool,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.holding.set(None);
        if let Ok(mut w) = self.world.try_borrow_mut() {
            let slot = w.mailbox(self.me);
            // Granted or not, this call will never be made: a grant left set would let the
            // worker's next call through unscheduled.
            slot.granted = false;
            if matches!(slot.status, Status::Parked { .. } | Status::Running { .. }) {
                slot.status = Status::Running {
                    op: self.op,
                    at: self.at,
                };
                slot.notes.push(format!(
                    "`{}` abandoned: the worker's connection went away while it was held",
                    self.op
                ));
            }
        }
    }
}

/// A connection of the worker's, watched while it is open ([`WireWorker::watch`]), whose every
/// read counts as a wire event ([`WireWorker::touch`]): for a proxy whose library buffers bytes
/// before it hands over a whole request (hyper), so that the bytes of a request still arriving
/// count as the worker moving.
pub struct Touching {
    inner: tokio::net::TcpStream,
    worker: Rc<WireWorker>,
    _watched: crate::sim::world::Watched,
}

impl Touching {
    /// `inner`, accepted by a proxy of `worker`'s: each reply goes out whole at once (no Nagle
    /// wait for the worker's delayed ACK), and its reads count for `worker`.
    pub fn new(inner: tokio::net::TcpStream, worker: Rc<WireWorker>) -> Touching {
        let _ = inner.set_nodelay(true);
        let _watched = worker.watch(&inner);
        Touching { inner, worker, _watched }
    }
}

impl tokio::io::AsyncRead for Touching {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(r, std::task::Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.worker.touch();
        }
        r
    }
}

impl tokio::io::AsyncWrite for Touching {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
