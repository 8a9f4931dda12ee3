//! State shared between the scheduler and the worker hosts of one schedule.
//!
//! Everything runs on one thread (turmoil steps host runtimes in turn), so the state is an
//! `Rc<RefCell<World>>`. Workers write what they did into their [`Mailbox`]; only the scheduler
//! moves it into the history, in a deterministic order.

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::record::history::CallCounts;
use crate::record::labels::Labels;
use std::rc::Rc;

use tokio::sync::Notify;

use super::fifo::{Accepted, FifoSend};
use crate::record::history::Step;
use crate::spec::{CrashPoint, Event};

/// Where a worker is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Its host is starting (connecting to the services).
    Starting,
    /// Waiting at a yield point, before the call `op`; `at` is the crash point it stands at.
    Parked {
        op: &'static str,
        at: Option<CrashPoint>,
    },
    /// Executing the call `op` (possibly blocked in the server).
    Running {
        op: &'static str,
        at: Option<CrashPoint>,
    },
    /// Nothing to do until the scheduler gives it work (a producer with nothing to dispatch);
    /// `at` is the crash point it stands at.
    Waiting { at: Option<CrashPoint> },
    /// Killed; nothing runs on its host until a restart.
    Crashed,
}

/// One worker's mailbox.
pub struct Mailbox {
    /// Where it is.
    pub status: Status,
    /// Set by the scheduler to let the parked worker make its call.
    pub granted: bool,
    /// Wakes the worker after `granted` is set.
    pub notify: Rc<Notify>,
    /// Its PostgreSQL backend pid, for `pg_blocking_pids`.
    pub backend_pid: Option<i32>,
    /// Whether its current call is a PostgreSQL statement (only those can be blocked by
    /// another worker's lock, so only those are checked with `pg_blocking_pids`).
    pub in_pg: bool,
    /// Whether its current call is an HTTP request on the simulated network (no real I/O: the
    /// scheduler steps the simulation without pausing while only such calls are in flight).
    pub in_net: bool,
    /// Crash points where the next pass throws an injected failure.
    pub armed_failures: Vec<CrashPoint>,
    /// Crash points where the worker is killed the next time it stands there.
    pub armed_crashes: Vec<CrashPoint>,
    /// The calls that completed since the scheduler last looked, in the order the trace gives
    /// them (one, but for a concurrent external worker: [`Mailbox::units`]).
    pub completed: Vec<Step>,
    /// For a concurrent external worker, the settle each of [`Mailbox::completed`] was granted in.
    pub completed_epochs: Vec<u64>,
    /// Notes the worker wrote since the scheduler last looked.
    pub notes: Vec<String>,
    /// Who blocks the worker in the server (set by the scheduler from `pg_blocking_pids`), or
    /// `None` when it is not blocked.
    pub blocked_by: Option<Vec<String>>,
    /// Whether its last receive/select found nothing (it is idle).
    pub idle: bool,
    /// Crash points passed (for coverage).
    pub passed: Vec<CrashPoint>,
    /// The label of the last call the worker completed since its host started (`claim`): it
    /// stands at the call boundary `after_<label>` ([`crate::spec::after_call`]) until its
    /// next call, whether or not its code marks a crash point there. An external worker's
    /// call that failed or was an idle poll (an empty receive, a poll that claimed no row)
    /// leaves `None`: no boundary stands after it.
    pub last_call: Option<&'static str>,
    /// Whether it has made no call since its loop started a new cycle (a receive, a poll, a
    /// dispatch): parked there after an idle cycle, it is quiescent.
    pub at_cycle_start: bool,
    /// Why the run must stop (an external worker the proxies cannot relay: it requires TLS,
    /// or bypassed a proxy). The scheduler fails the run with it (exit 2).
    pub fatal: Option<String>,
    /// Every PostgreSQL backend an external worker opened (its pools): all are terminated when
    /// it crashes, so that none keeps its locks.
    pub backend_pids: Vec<i32>,
    /// Set by the scheduler for `crash@<call>:applied`: the granted call is applied but its
    /// reply withheld from the worker, which is then killed.
    pub withhold: bool,
    /// Requests an external worker's SQS proxy has received (any operation).
    pub sqs_requests: u64,
    /// Set by `c1:stop` until the worker ends: it should finish its current message and
    /// release what it holds ([`crate::sim::cx::Cx::stop_requested`]).
    pub stop_requested: bool,
    /// A concurrent external worker's held calls ([`crate::sim::wire::External::concurrent`]),
    /// in the order `c1`, `c1/2`, `c1/3`, … grant them: by the settle they arrived in, then by
    /// their text ([`Unit::key`]), then by [`Unit::tie`], then by arrival. Empty for every other worker.
    pub units: Vec<Unit>,
    /// A concurrent external worker's granted calls whose reply it has not had yet.
    pub in_flight: Vec<InFlight>,
    /// Counts a concurrent external worker's wire events (a byte read or written by one of its
    /// proxies, a call held, granted or answered): the scheduler deems the process settled once
    /// this stops moving ([`crate::sim::wire::worker`]).
    pub activity: u64,
    /// A concurrent external worker's ungated exchanges under way (a connection's start-up, a
    /// call that passes): while any is, the process is moving.
    pub pending: u32,
    /// A concurrent external worker's process id, for its CPU time (`/proc/<pid>/task/*/schedstat`).
    pub process_pid: Option<u32>,
    /// Whether the worker made a call in this schedule (any of its processes): a process that
    /// exits by itself before is one that cannot start (a setup error), after it is a finding.
    pub made_calls: bool,
    /// Set by an external worker's host when its process exited by itself after it made calls
    /// (how: `exit status: 1`, `signal: 6 (SIGABRT)`), with the last lines of its log; the
    /// scheduler takes it and ends the host as a crash the worker caused itself.
    pub exited: Option<(String, String)>,
    /// The harness's ends of an external worker's sockets: bytes the worker sent that no proxy
    /// has read yet, or a connection no proxy has accepted yet, mean that its process has not
    /// finished reacting, however still it looks ([`crate::sim::scheduler::quiet`]).
    pub sockets: Sockets,
}

/// The harness's ends of an external worker's sockets ([`Mailbox::sockets`]).
#[derive(Debug, Default, Clone)]
pub struct Sockets {
    /// Its proxies' listening sockets: a connection waits in one until its proxy accepts it.
    pub listening: Vec<Fd>,
    /// The connections its proxies accepted and still serve: bytes wait in one until its proxy
    /// reads them.
    pub accepted: std::collections::BTreeSet<Fd>,
}

/// A socket as a raw descriptor with the inode it names: a descriptor closed and numbered
/// again for another socket (a host dropped while its guards could not reach the world) is
/// told apart, and not looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fd {
    /// The descriptor.
    pub fd: i32,
    ino: u64,
}

impl Fd {
    /// Descriptor `fd` with the inode it names now (0 when it names none).
    pub fn of(fd: i32) -> Fd {
        Fd { fd, ino: inode(fd) }
    }

    /// Whether the descriptor still names the socket it named when taken.
    pub fn still(&self) -> bool {
        self.ino != 0 && inode(self.fd) == self.ino
    }
}

/// The inode descriptor `fd` names (`fstat(2)`), 0 when it names none.
fn inode(fd: i32) -> u64 {
    // SAFETY: fstat writes one `stat` to a zeroed buffer of that type, for the call's duration.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    match unsafe { libc::fstat(fd, &mut st) } {
        0 => st.st_ino,
        _ => 0,
    }
}

/// A connection a proxy accepted, in [`Sockets::accepted`] until this is dropped (its task
/// ends, or its host with it).
pub struct Watched {
    world: SharedWorld,
    worker: String,
    fd: Fd,
}

impl Watched {
    /// Puts `fd`, a connection of `worker`'s a proxy accepted, in its [`Sockets::accepted`].
    pub fn new(world: SharedWorld, worker: String, fd: i32) -> Watched {
        let fd = Fd::of(fd);
        world.borrow_mut().mailbox(&worker).sockets.accepted.insert(fd);
        Watched { world, worker, fd }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        // A host dropped while the world is borrowed leaves its descriptors: the host that
        // starts next in the worker's place sets the listening ones anew and clears these.
        if let Ok(mut w) = self.world.try_borrow_mut() {
            if let Some(m) = w.mailboxes.get_mut(&self.worker) {
                m.sockets.accepted.remove(&self.fd);
            }
        }
    }
}

/// One held call of a concurrent external worker.
#[derive(Debug, Clone)]
pub struct Unit {
    /// Its number in the process (1, 2, … in arrival order; for tie-breaks and the proxy).
    pub id: u64,
    /// Its call label (`claim`).
    pub op: &'static str,
    /// What tells it apart from the process's other held calls, whatever the real-time order
    /// they arrived in: its SQL and bound parameters, its SQS operation and the messages it
    /// names, its Redis command and arguments.
    pub key: String,
    /// The settle it arrived in ([`World::epoch`]).
    pub epoch: u64,
    /// Between units of one settle and key, the lower goes first (the PostgreSQL connection's
    /// number in the order the worker opened them).
    pub tie: u64,
    /// Whether it arrived as the top of the consumer's loop (a receive from its own queue).
    pub cycle_start: bool,
    /// Set by the scheduler to let it go.
    pub granted: bool,
    /// Wakes it after `granted` is set.
    pub notify: Rc<Notify>,
}

/// A granted call of a concurrent external worker, not answered yet.
#[derive(Debug, Clone)]
pub struct InFlight {
    /// Its [`Unit::id`].
    pub id: u64,
    /// Its call label.
    pub op: &'static str,
    /// Its PostgreSQL backend, for `pg_blocking_pids` (`None`: SQS or Redis).
    pub pid: Option<i32>,
    /// Who blocks it in the server, set by the scheduler.
    pub blocked_by: Option<Vec<String>>,
}

impl Mailbox {
    /// The crash point the worker stands at, as its status says.
    pub fn at(&self) -> Option<CrashPoint> {
        match self.status {
            Status::Parked { at, .. } | Status::Running { at, .. } | Status::Waiting { at } => at,
            _ => None,
        }
    }

    /// Takes the failure armed at crash point `at` (`fail@at`), if any: the call made from
    /// there fails instead of going to its service.
    pub fn take_armed_failure(&mut self, at: Option<CrashPoint>) -> Option<CrashPoint> {
        let i = self.armed_failures.iter().position(|c| Some(*c) == at || self.after_last_call(c))?;
        Some(self.armed_failures.remove(i))
    }

    /// Whether `cp` names the call boundary the worker stands at, `after_<label of its last
    /// call>` ([`Mailbox::last_call`]).
    pub fn after_last_call(&self, cp: &str) -> bool {
        self.last_call.is_some_and(|op| crate::spec::is_after_call(cp, op))
    }

    /// Whether the worker stands at crash point `cp`: waiting at a yield point (or for work)
    /// where its code marked `cp`, or right after a call labelled so that `cp` is its
    /// boundary (`after_commit` after the call `commit`).
    pub fn stands_at(&self, cp: CrashPoint) -> bool {
        match self.status {
            Status::Parked { at, .. } | Status::Waiting { at } => at == Some(cp) || self.after_last_call(cp),
            _ => false,
        }
    }

    /// Whether this is a concurrent external worker's slot with calls held or in flight.
    pub fn has_units(&self) -> bool {
        !self.units.is_empty() || !self.in_flight.is_empty()
    }

    /// Sets a concurrent worker's [`Mailbox::status`] from its calls: moving while a call it was
    /// granted runs unblocked in the server, else parked before its first held call, else
    /// blocked (every call in flight waits on a lock) or moving (it may be about to call).
    pub fn summarize(&mut self, at: Option<CrashPoint>) {
        if self.status == Status::Crashed || self.status == Status::Starting && !self.has_units() {
            return;
        }
        self.at_cycle_start = self.in_flight.is_empty()
            && !self.units.is_empty()
            && self.units.iter().all(|u| u.cycle_start);
        if let Some(f) = self.in_flight.iter().find(|f| f.blocked_by.is_none()) {
            self.status = Status::Running { op: f.op, at };
            self.blocked_by = None;
        } else if let Some(u) = self.units.first() {
            self.status = Status::Parked { op: u.op, at };
            self.blocked_by = None;
        } else if let Some(f) = self.in_flight.first() {
            self.status = Status::Running { op: f.op, at };
            let mut by: Vec<String> = self
                .in_flight
                .iter()
                .flat_map(|f| f.blocked_by.clone().unwrap_or_default())
                .collect();
            by.sort();
            by.dedup();
            self.blocked_by = Some(by);
        } else if !matches!(self.status, Status::Waiting { .. }) {
            self.status = Status::Running { op: "", at };
            self.blocked_by = None;
        }
    }
}

impl Mailbox {
    fn new() -> Mailbox {
        Mailbox {
            status: Status::Starting,
            granted: false,
            notify: Rc::new(Notify::new()),
            backend_pid: None,
            in_pg: false,
            in_net: false,
            armed_failures: Vec::new(),
            armed_crashes: Vec::new(),
            completed: Vec::new(),
            completed_epochs: Vec::new(),
            notes: Vec::new(),
            blocked_by: None,
            idle: false,
            passed: Vec::new(),
            last_call: None,
            at_cycle_start: false,
            fatal: None,
            backend_pids: Vec::new(),
            withhold: false,
            sqs_requests: 0,
            stop_requested: false,
            units: Vec::new(),
            in_flight: Vec::new(),
            activity: 0,
            pending: 0,
            process_pid: None,
            made_calls: false,
            exited: None,
            sockets: Sockets::default(),
        }
    }
}

/// The shared state of one schedule.
pub struct World {
    /// One slot per worker, by name.
    pub mailboxes: BTreeMap<String, Mailbox>,
    /// Labels for ids.
    pub names: Labels,
    /// The logical clock, in ms since the schedule started.
    pub now_ms: u64,
    /// Real calls made by workers.
    pub calls: CallCounts,
    /// Events the producer still has to dispatch, in order; the front is removed once its
    /// dispatch returned (so a producer restarted mid-dispatch dispatches it again).
    pub to_dispatch: std::collections::VecDeque<Event>,
    /// The SQS nemesis: armed AWS-only behaviours, latest receipt handles, bodies.
    pub sqs: crate::nemesis::sqs::SqsNemesis,
    /// The PostgreSQL nemesis: armed lost COMMIT replies and connection resets.
    pub pg: crate::nemesis::pg::PgNemesis,
    /// The Redis faults armed and not yet fired.
    pub redis: crate::nemesis::redis::RedisNemesis,
    /// Receives of each message label so far (SQS `ApproximateReceiveCount`), for workers whose
    /// receives do not ask SQS for it (Symfony Messenger 5.4).
    pub receive_counts: BTreeMap<String, u32>,
    /// The simulated network to the workload's providers: armed faults, partitions, held
    /// requests, the providers' lane lines.
    pub net: super::net::NetState,
    /// Lock tokens handed out so far ([`crate::sim::cx::Cx::lock`]): the next is one more, so
    /// tokens are unique within the schedule across worker restarts.
    pub lock_tokens: u64,
    /// The FIFO queues' accepted deduplication ids, in logical time.
    pub fifo: super::fifo::FifoDedup,
    /// Settles so far: a concurrent external worker's calls held in one settle come before
    /// those held in a later one ([`Unit::epoch`]).
    pub epoch: u64,
}

/// The handle workers and the scheduler share.
pub type SharedWorld = Rc<RefCell<World>>;

impl World {
    /// A world with one slot per worker name.
    pub fn new(workers: &[String], names: Labels) -> SharedWorld {
        Rc::new(RefCell::new(World {
            mailboxes: workers.iter().map(|w| (w.clone(), Mailbox::new())).collect(),
            names,
            now_ms: 0,
            calls: CallCounts::default(),
            to_dispatch: Default::default(),
            sqs: Default::default(),
            pg: Default::default(),
            redis: Default::default(),
            receive_counts: BTreeMap::new(),
            net: Default::default(),
            lock_tokens: 0,
            fifo: super::fifo::FifoDedup::new(),
            epoch: 0,
        }))
    }

    /// Records a receive of `msg`: SQS's count when the reply carried it, else one more than
    /// the receives seen so far. Returns the count.
    pub fn count_receive(&mut self, msg: &str, reported: Option<u32>) -> u32 {
        let seen = self.receive_counts.entry(msg.to_string()).or_default();
        *seen = reported.unwrap_or(*seen + 1).max(*seen);
        *seen
    }

    /// Labels the message that SQS answered a send to `queue` with (`message_id`; labels of
    /// `prefix`) and returns the label. On a FIFO queue (`fifo_queue`) an answer naming a
    /// message SQS had accepted before means it dropped the send as a duplicate (SendMessage
    /// answers with the first message's id; LocalStack does too, and `crashpoint doctor`
    /// probes it): `Err` with that message and when it was accepted. Otherwise a FIFO message
    /// is recorded as accepted now, and `send` (the ids the engine chose, `None` for an
    /// external worker's own) starts its identity's window.
    pub fn sent(
        &mut self,
        queue: &'static str,
        prefix: &'static str,
        message_id: &str,
        fifo_queue: bool,
        send: Option<&FifoSend>,
    ) -> Result<String, Accepted> {
        if let Some(msg) = self.names.get(message_id).filter(|_| fifo_queue) {
            let at_ms = self.fifo.accepted_at(&msg).unwrap_or(self.now_ms);
            return Err(Accepted { msg, at_ms });
        }
        let msg = self.names.label(prefix, message_id);
        if fifo_queue {
            self.fifo.accepted(queue, send, &msg, self.now_ms);
        }
        Ok(msg)
    }

    /// The slot of `worker`. Panics on an unknown name (a harness bug).
    pub fn mailbox(&mut self, worker: &str) -> &mut Mailbox {
        self.mailboxes
            .get_mut(worker)
            .unwrap_or_else(|| panic!("no worker named {worker}"))
    }
}
