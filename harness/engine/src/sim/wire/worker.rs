//! One external worker as the scheduler sees it: the gate its three proxies share.
//!
//! Every gated call parks the worker in its slot of the shared world exactly as an
//! in-process call does (the same `park` as [`crate::sim::cx::Cx`]); when the reply has reached the process,
//! the call becomes a [`Step`] with its [`Outcome`] and [`Fact`]s, and the worker stands at the
//! crash point after that call until its next request is held.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use async_trait::async_trait;

use super::gate::{Admit, PgCall, PgGate, PgReply};
use super::spec::{intern, External};
use crate::nemesis::pg::PgFault;
use crate::sim::cx::QueueUrls;
use crate::sim::history::{Fact, Outcome, Service, Step};
use crate::sim::world::{SharedWorld, Status};
use crate::spec::{CrashPoint, IdentityFn};

/// Statements that pass the PostgreSQL proxy ungated: pools' health checks and session setup
/// (upper case, compared as prefixes of the trimmed statement).
const PG_PASS: &[&str] = &["SELECT 1", "SET ", "SHOW ", "DISCARD ALL", "RESET ALL"];

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
    /// The call held at the gate now, if any.
    holding: Cell<Option<&'static str>>,
    /// The call held or in flight: its label, how it was granted.
    current: RefCell<Option<(&'static str, Granted)>>,
    /// Receipt handles it received, to the message's (queue, label).
    receipts: RefCell<BTreeMap<String, (&'static str, String)>>,
}

impl WireWorker {
    /// A gate for worker `me`.
    pub fn new(me: String, world: SharedWorld, ext: std::sync::Arc<External>, queue: Option<&'static str>, queues: QueueUrls, identity: Rc<IdentityFn>) -> WireWorker {
        WireWorker { me, world, ext, queue, queues, identity, at: Cell::new(None), holding: Cell::new(None), current: RefCell::new(None), receipts: RefCell::new(BTreeMap::new()) }
    }

    /// Parks the worker before call `op` until the scheduler grants it. `cycle_start` marks a
    /// receive from its own queue (the top of a consumer's loop). Returns how it was granted.
    pub async fn hold(&self, op: &'static str, service: Service, cycle_start: bool) -> Granted {
        if let Some(other) = self.holding.replace(Some(op)) {
            self.fatal(format!(
                "{}: `{op}` was sent while `{other}` was held: crashpoint needs one handling thread per worker \
                 process (calls one at a time)",
                self.me
            ));
        }
        if cycle_start {
            self.world.borrow_mut().slot(&self.me).at_cycle_start = true;
        }
        let mut guard = Abandoned { world: &self.world, me: &self.me, op, at: self.at.get(), holding: &self.holding, armed: true };
        let failed = crate::sim::gate::park(&self.world, &self.me, op, self.at.get()).await;
        guard.armed = false;
        self.holding.set(None);
        let mut w = self.world.borrow_mut();
        let withhold = std::mem::take(&mut w.slot(&self.me).withhold);
        let granted = match failed {
            Some(cp) => Granted::Fail(cp),
            None if withhold => Granted::Withhold,
            None => Granted::Go,
        };
        w.calls.add(service);
        w.slot(&self.me).in_pg = service == Service::Postgres && failed.is_none();
        *self.current.borrow_mut() = Some((op, granted));
        granted
    }

    /// Starts a call that passes without a hold (an SDK retry of a granted call): it is
    /// counted and recorded like any call, and decides nothing.
    pub fn ungated(&self, op: &'static str, service: Service) {
        self.world.borrow_mut().calls.add(service);
        *self.current.borrow_mut() = Some((op, Granted::Go));
    }

    /// The call held last completed with `outcome` and `facts`: records its step; the worker
    /// now stands at the crash point after it.
    pub fn complete(&self, service: Service, outcome: Outcome, facts: Vec<Fact>) {
        let Some((op, granted)) = self.current.borrow_mut().take() else { return };
        let (service, outcome) = match granted {
            Granted::Fail(at) => (Service::None, Outcome::ServiceErrorInjected { at }),
            _ => (service, outcome),
        };
        // As in-process: a crash point is reached only by a call that succeeded, and the one
        // after a receive only when a message came (an idle poll stands nowhere).
        // A poller's poll that found no row is an idle poll too.
        let reached = !outcome.failed()
            && !matches!(outcome, Outcome::Empty | Outcome::ReceiveLost { .. })
            && !(self.ext.poll == Some(op) && no_rows(&outcome));
        let at = self.at.replace(if reached { self.ext.point_after(op) } else { None });
        let mut w = self.world.borrow_mut();
        let t_ms = w.now_ms;
        let slot = w.slot(&self.me);
        slot.in_pg = false;
        if let Some(cp) = self.at.get() {
            slot.passed.push(cp);
        }
        slot.completed = Some(Step { t_ms, worker: self.me.clone(), op: op.to_string(), service, at, outcome, idle: false, facts });
        if granted == Granted::Withhold && service == Service::Postgres {
            // It will never move again: the scheduler kills it now.
            slot.status = Status::Waiting { at: self.at.get() };
            slot.notes.push(format!("the reply to `{op}` is withheld: applied, and the worker dies before it hears of it"));
        }
    }

    /// Marks the worker idle (its receive found nothing) or busy.
    pub fn set_idle(&self, idle: bool) {
        let mut w = self.world.borrow_mut();
        let slot = w.slot(&self.me);
        slot.idle = idle;
        if let Some(step) = slot.completed.as_mut() {
            step.idle = idle;
        }
    }

    /// Ends the run: something about the worker cannot be relayed (exit 2, naming it).
    pub fn fatal(&self, why: String) {
        let mut w = self.world.borrow_mut();
        w.slot(&self.me).fatal.get_or_insert(why);
    }

    /// Adds a line to the trace.
    pub fn note(&self, text: String) {
        self.world.borrow_mut().slot(&self.me).notes.push(text);
    }

    /// The trace label of id `id` with `prefix`.
    pub fn label(&self, prefix: &'static str, id: &str) -> String {
        self.world.borrow_mut().names.label(prefix, id)
    }

    /// Remembers that `receipt` belongs to message `msg` of `queue`.
    pub fn remember_receipt(&self, receipt: &str, queue: &'static str, msg: &str) {
        self.receipts.borrow_mut().insert(receipt.to_string(), (queue, msg.to_string()));
    }

    /// The (queue, label) of the message a receipt handle belongs to.
    pub fn message_of(&self, receipt: &str) -> Option<(&'static str, String)> {
        self.receipts.borrow().get(receipt).cloned()
    }

    /// The declared name of the queue whose URL (real or through the proxy) ends like `url`.
    pub fn queue_of_url(&self, url: &str) -> Option<&'static str> {
        let last = url.rsplit('/').next()?;
        self.queues.queues.iter().find(|(_, u, _)| u.rsplit('/').next() == Some(last)).map(|(n, _, _)| *n)
    }
}

/// The text of the service error a proxy answers for a failure injected at `cp` (the same in
/// every protocol, so that a worker's logs name it).
pub fn injected_error(cp: CrashPoint) -> String {
    format!("crashpoint: service error injected at {cp}")
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
            let slot = w.slot(self.me);
            // Granted or not, this call will never be made: a grant left set would let the
            // worker's next call through unscheduled.
            slot.granted = false;
            if matches!(slot.status, Status::Parked { .. } | Status::Running { .. }) {
                slot.status = Status::Running { op: self.op, at: self.at };
                slot.notes.push(format!("`{}` abandoned: the worker's connection went away while it was held", self.op));
            }
        }
    }
}

/// The statements of a simple Query's text: split at `;` outside quotes, dollar quotes and
/// comments (a `SET …; INSERT …` must not pass as a `SET`).
pub fn statements(sql: &str) -> Vec<String> {
    let (mut out, mut cur) = (Vec::new(), String::new());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                cur.push(c);
                for d in chars.by_ref() {
                    cur.push(d);
                    if d == c {
                        break;
                    }
                }
            }
            '$' if chars.peek() == Some(&'$') => {
                cur.push_str("$$");
                chars.next();
                while let Some(d) = chars.next() {
                    cur.push(d);
                    if d == '$' && chars.peek() == Some(&'$') {
                        cur.push('$');
                        chars.next();
                        break;
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        break;
                    }
                }
            }
            ';' => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

/// The label of a PostgreSQL call: a `/* crashpoint:NAME */` comment in its SQL, else
/// `begin`, `commit` or `rollback` for those statements, else `sql`.
pub fn pg_label(call: &PgCall) -> &'static str {
    if let Some(label) = comment_label(call) {
        return label;
    }
    keyword_label(call)
}

/// The label of `call` from its first keyword alone: `begin`, `commit`, `rollback` or `sql`.
pub(crate) fn keyword_label(call: &PgCall) -> &'static str {
    let first = call.sql.iter().map(|s| s.trim_start().to_ascii_uppercase()).find(|s| !s.is_empty()).unwrap_or_default();
    let word = first.split(|c: char| !c.is_ascii_alphabetic()).next().unwrap_or("");
    match word {
        "BEGIN" | "START" => "begin",
        "COMMIT" | "END" => "commit",
        "ROLLBACK" | "ABORT" => "rollback",
        _ => "sql",
    }
}

/// The label a `/* crashpoint:NAME */` comment in the call's SQL gives it.
fn comment_label(call: &PgCall) -> Option<&'static str> {
    call.sql.iter().find_map(|sql| {
        let i = sql.find("crashpoint:")?;
        let name: String = sql[i + 11..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').collect();
        (!name.is_empty()).then(|| intern(&name))
    })
}

/// Whether a statement's outcome found nothing: no row returned, affected or fetched.
fn no_rows(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Returned { row: false } | Outcome::Affected { n: 0 } | Outcome::Fetched { n: 0 })
}

/// What a PostgreSQL reply says, as an [`Outcome`].

pub fn pg_outcome(call: &PgCall, reply: &PgReply) -> Outcome {
    if let Some((_, message)) = &reply.error {
        return Outcome::Error { message: message.clone() };
    }
    let Some(tag) = reply.tags.last() else { return Outcome::Done };
    let mut words = tag.split(' ');
    let n: u64 = tag.rsplit(' ').next().and_then(|n| n.parse().ok()).unwrap_or(0);
    let returning = call.sql.iter().any(|s| s.to_ascii_uppercase().contains("RETURNING"));
    match words.next().unwrap_or("") {
        "INSERT" | "UPDATE" | "DELETE" | "MERGE" if returning => Outcome::Returned { row: reply.rows > 0 },
        "INSERT" | "UPDATE" | "DELETE" | "MERGE" => Outcome::Affected { n },
        "SELECT" => Outcome::Fetched { n },
        _ => Outcome::Done,
    }
}

#[async_trait(?Send)]
impl PgGate for WireWorker {
    fn refused(&self, why: String) {
        self.fatal(format!("{}: {why}", self.me));
    }

    fn backend(&self, pid: i32) {
        let mut w = self.world.borrow_mut();
        let slot = w.slot(&self.me);
        slot.backend_pid = Some(pid);
        if !slot.backend_pids.contains(&pid) {
            slot.backend_pids.push(pid);
        }
    }

    fn gated(&self, call: &PgCall) -> bool {
        if call.terminate || !call.executes {
            return false;
        }
        let passes = |s: &str| {
            let s = s.trim().to_ascii_uppercase();
            s.is_empty() || PG_PASS.iter().any(|p| s.starts_with(p.trim_end()) && (s.len() == p.trim_end().len() || p.ends_with(' ')))
                || self.ext.pass.iter().any(|p| s.starts_with(p.as_str()))
        };
        !call.sql.iter().flat_map(|sql| statements(sql)).all(|st| passes(&st))
    }

    async fn hold(&self, pid: i32, call: &PgCall) -> Admit {
        self.backend(pid);
        let label = comment_label(call)
            .or_else(|| call.sql.iter().find_map(|sql| self.ext.label_of(sql, true)))
            .unwrap_or_else(|| pg_label(call));
        match WireWorker::hold(self, label, Service::Postgres, self.ext.poll == Some(label)).await {
            Granted::Fail(cp) => Admit::Fail(injected_error(cp)),
            Granted::Withhold => Admit::Withhold,
            Granted::Go => {
                // As in-process: a reset takes the next statement; a lost reply takes the next
                // COMMIT that commits (not one in a failed transaction, which rolls back).
                let commits = keyword_label(call) == "commit" && call.status == Some(b'T');
                let mut w = self.world.borrow_mut();
                if w.pg.take(PgFault::ConnectionReset) {
                    Admit::Reset
                } else if commits && w.pg.take(PgFault::CommitResponseLost) {
                    Admit::LoseReply
                } else {
                    Admit::Forward
                }
            }
        }
    }

    fn replied(&self, _pid: i32, call: &PgCall, reply: PgReply) {
        let outcome = pg_outcome(call, &reply);
        let polled = self.ext.poll.is_some_and(|p| self.current.borrow().as_ref().is_some_and(|(op, _)| *op == p));
        let idle = no_rows(&outcome);
        self.complete(Service::Postgres, outcome, vec![]);
        if polled {
            self.set_idle(idle);
        }
    }

    fn dropped(&self, _pid: i32, _call: &PgCall, message: &str) {
        self.complete(Service::Postgres, Outcome::Error { message: message.to_string() }, vec![]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(sql: &str) -> PgCall {
        PgCall { sql: vec![sql.to_string()], terminate: false, executes: true, status: Some(b'T') }
    }

    #[test]
    fn labels_come_from_comments_then_keywords() {
        assert_eq!(pg_label(&call("/* crashpoint:claim */ INSERT INTO t VALUES (1)")), "claim");
        assert_eq!(pg_label(&call("begin")), "begin");
        assert_eq!(pg_label(&call("COMMIT")), "commit");
        assert_eq!(pg_label(&call("UPDATE t SET x = 1")), "sql");
    }

    #[test]
    fn statements_split_outside_quotes_and_comments() {
        assert_eq!(statements("SET x = 1; INSERT INTO t VALUES (';')"), vec!["SET x = 1", "INSERT INTO t VALUES (';')"]);
        assert_eq!(statements("SELECT $$a;b$$ -- c;d\n; "), vec!["SELECT $$a;b$$"]);
        assert_eq!(statements(""), Vec::<String>::new());
    }

    #[test]
    fn outcomes_follow_the_command_tags() {
        let r = |tag: &str, rows| PgReply { tags: vec![tag.into()], rows, error: None, status: Some(b'T') };
        assert_eq!(pg_outcome(&call("INSERT INTO t VALUES (1) RETURNING id"), &r("INSERT 0 0", 0)), Outcome::Returned { row: false });
        assert_eq!(pg_outcome(&call("INSERT INTO t VALUES (1) RETURNING id"), &r("INSERT 0 1", 1)), Outcome::Returned { row: true });
        assert_eq!(pg_outcome(&call("UPDATE t SET x = 1"), &r("UPDATE 3", 0)), Outcome::Affected { n: 3 });
        assert_eq!(pg_outcome(&call("SELECT 2"), &r("SELECT 1", 1)), Outcome::Fetched { n: 1 });
        let e = PgReply { error: Some(("23505".into(), "duplicate key".into())), ..Default::default() };
        assert_eq!(pg_outcome(&call("INSERT"), &e), Outcome::Error { message: "duplicate key".into() });
    }
}
