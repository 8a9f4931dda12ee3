//! The seam between the engine and a system under test: the programs of a workload's roles
//! ([`Producer`], [`Handler`], [`Poller`], handed out by a [`System`]; `program.rs`) and the
//! worker context they are given, the only way worker code reaches PostgreSQL, SQS and Redis.
//!
//! Every call first waits at a yield point until the scheduler grants it, then runs against
//! the real service, then reports a short result and its [`Fact`]s. Crash points are marked
//! with [`Cx::crash_point`]; an injected failure armed there is returned as
//! [`CallError::Injected`].

use std::rc::Rc;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::PgConnection;
use uuid::Uuid;

pub(crate) mod sqs;

pub use sqs::FailedEntry;

mod program;
pub use program::{handle_one, handler_failed, Handler, Poller, Producer, Program, SendEach, System, HANDLER_ERROR};

use crate::record::history::{Fact, Outcome, Service, Step};
use super::world::{SharedWorld, Status};
use crate::sim::model::redis as model;
use crate::sim::model::pg as pg_model;
use crate::nemesis::pg::PgFault;
use crate::nemesis::redis::RedisFault;
use crate::spec::CrashPoint;
use crate::duration::epoch;
use crate::namespace::queues::QueueUrls;


/// Compare-and-delete of a lock: `DEL` only when the key still holds the caller's token
/// (Redis documentation, "Distributed locks with Redis": the release script). Returns the
/// number of keys deleted, 0 or 1.
pub const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";


/// Why a call or a handler step failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// A failure injected by the schedule at a crash point (`c1:fail@after_claim`).
    #[error("injected failure at {0}")]
    Injected(CrashPoint),
    /// The service returned an error.
    #[error("{0}")]
    Service(String),
    /// No response came from a provider ([`Cx::http`]): the request may or may not have been
    /// applied (the orders article: "an HTTP timeout likewise means that the outcome may be unknown").
    #[error("no response: {0}")]
    NoResponse(String),
    /// The handler decided that retrying cannot help (Messenger's
    /// `UnrecoverableMessageHandlingException`).
    #[error("unrecoverable: {0}")]
    Unrecoverable(String),
}

impl From<sqlx::Error> for CallError {
    fn from(e: sqlx::Error) -> Self {
        CallError::Service(match e.as_database_error() {
            Some(db) => format!("postgres {}: {}", db.code().unwrap_or_default(), db.message()),
            None => e.to_string(),
        })
    }
}

/// A bind parameter for a PostgreSQL statement.
#[derive(Debug, Clone)]
pub enum Val {
    /// `uuid`
    Uuid(Uuid),
    /// `bigint`
    I64(i64),
    /// `text`/`varchar`
    Text(String),
    /// `jsonb`
    Json(serde_json::Value),
    /// `timestamptz`
    Time(DateTime<Utc>),
    /// `timestamptz`: the logical now at the moment the call is made (not when the worker
    /// parked before it).
    Now,
    /// `timestamptz`: the logical now minus this many seconds, at the moment of the call.
    NowMinusS(u64),
}

/// A received message.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The queue it came from (its [`crate::spec::QueueSpec::name`]).
    pub queue: &'static str,
    /// Its trace label (`m1`).
    pub msg: String,
    /// The body (JSON).
    pub body: String,
    /// The receipt handle of this receive.
    pub receipt: String,
    /// SQS `ApproximateReceiveCount`: 1 on the first receive.
    pub receive_count: u32,
}


/// One worker's connections and its line to the scheduler.
pub struct Cx {
    me: String,
    world: SharedWorld,
    /// `None` only while the host drops it ([`Drop`] leaves it on the shelf or closes it).
    pg: Option<crate::namespace::worker_pg::WorkerPg>,
    shelf: Rc<crate::namespace::worker_pg::Shelf>,
    sqs: aws_sdk_sqs::Client,
    redis: redis::aio::MultiplexedConnection,
    queues: QueueUrls,
    config: Rc<dyn std::any::Any>,
    at: Option<CrashPoint>,
    in_tx: bool,
    /// Whether a statement of this session named `pg_backend_pid` ([`names_backend_pid`]).
    pid_named: bool,
    /// Facts to record with the next call (e.g. the start of a dispatch).
    pending_facts: Vec<Fact>,
}

impl Cx {
    /// Wraps a worker's connections. `pg` must already have its search_path set; it goes back
    /// to `shelf` when the host stops idle at the schedule's end.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        me: String,
        world: SharedWorld,
        pg: crate::namespace::worker_pg::WorkerPg,
        shelf: Rc<crate::namespace::worker_pg::Shelf>,
        sqs: aws_sdk_sqs::Client,
        redis: redis::aio::MultiplexedConnection,
        queues: QueueUrls,
        config: Rc<dyn std::any::Any>,
    ) -> Cx {
        world.borrow_mut().mailbox(&me).backend_pid = Some(pg.pid);
        Cx { me, world, pg: Some(pg), shelf, sqs, redis, queues, config, at: None, in_tx: false, pid_named: false, pending_facts: Vec::new() }
    }

    /// The worker's PostgreSQL connection.
    fn pg(&mut self) -> &mut PgConnection {
        &mut self.pg.as_mut().expect("taken only when the Cx is dropped").conn
    }

    /// The shared world (for the worker loops).
    pub(crate) fn world(&self) -> &SharedWorld {
        &self.world
    }

    /// This worker's name.
    pub fn name(&self) -> &str {
        &self.me
    }

    /// The workload's handler policy, as parsed by [`crate::workload::Workload::config`].
    /// Panics when `T` is not the type the workload's `config` returns (a workload bug).
    pub fn config<T: 'static>(&self) -> &T {
        self.config.downcast_ref::<T>().unwrap_or_else(|| {
            panic!("Cx::config::<{}>: the workload's config has another type", std::any::type_name::<T>())
        })
    }

    /// Records `fact` with the worker's next call (not a yield point).
    pub(crate) fn record_with_next_call(&mut self, fact: Fact) {
        self.pending_facts.push(fact);
    }

    /// Marks the start of a cycle of the worker loop (before a receive, a poll, a dispatch):
    /// the drain treats a worker parked at its first call since then, after a cycle that found
    /// nothing, as idle.
    pub(crate) fn cycle_start(&mut self) {
        self.world.borrow_mut().mailbox(&self.me).at_cycle_start = true;
    }

    /// Logical now, as a timestamp (epoch 2026-01-01 plus the logical clock).
    pub fn now(&self) -> DateTime<Utc> {
        epoch() + chrono::Duration::milliseconds(self.world.borrow().now_ms as i64)
    }

    /// Trace label of an id, assigned `<prefix><n>` on first sight.
    pub fn label(&self, prefix: &'static str, id: impl ToString) -> String {
        self.world.borrow_mut().names.label(prefix, id)
    }

    /// Adds a line to the trace (not a yield point).
    pub fn note(&self, text: impl Into<String>) {
        self.world.borrow_mut().mailbox(&self.me).notes.push(text.into());
    }

    /// Marks `d` as the message this handler now works on (a fact recorded with its next
    /// call). A handler error after it leaves `d` to its visibility timeout on purpose, and the
    /// graceful-stop invariant does not count it as held; messages of the same receive not yet
    /// marked stay the worker's to release. The engine marks the delivery of a one-message
    /// receive itself; a batch handler marks each message as it starts it.
    pub fn handling(&mut self, d: &Delivery) {
        self.record_with_next_call(Fact::Handling { msg: d.msg.clone() });
    }

    /// Whether a graceful stop was asked of this worker (`c1:stop`, SIGTERM to a Messenger
    /// worker): a handler holding several messages of one receive finishes the one it is on,
    /// then releases the rest (ChangeMessageVisibility 0) and acknowledges what it handled
    /// before returning; the engine ends the worker at its next receive.
    pub fn stop_requested(&self) -> bool {
        self.world.borrow_mut().mailbox(&self.me).stop_requested
    }

    /// Marks a crash point: the worker now stands at `cp` until its next call. A crash or an
    /// injected failure scheduled at `cp` happens there (see `crate::schedule::Decision`).
    pub fn crash_point(&mut self, cp: CrashPoint) {
        self.at = Some(cp);
        self.world.borrow_mut().mailbox(&self.me).passed.push(cp);
    }

    /// Parks at a yield point until the scheduler grants the call `op`. Returns
    /// [`CallError::Injected`] instead when the schedule armed a failure at the crash point the
    /// worker stands at; the call is then not made.
    async fn gate(&mut self, op: &'static str) -> Result<(), CallError> {
        if let Some(cp) = super::gate::park(&self.world, &self.me, op, self.at).await {
            self.complete(op, Service::None, Outcome::Injected { at: cp }, vec![]);
            return Err(CallError::Injected(cp));
        }
        Ok(())
    }

    fn set_in_pg(&self, in_pg: bool) {
        self.world.borrow_mut().mailbox(&self.me).in_pg = in_pg;
    }

    fn complete(&mut self, op: &'static str, service: Service, outcome: Outcome, mut facts: Vec<Fact>) {
        if !self.pending_facts.is_empty() {
            let mut first = std::mem::take(&mut self.pending_facts);
            first.append(&mut facts);
            facts = first;
        }
        let at = self.at.take();
        let mut w = self.world.borrow_mut();
        w.mailbox(&self.me).in_pg = false;
        w.mailbox(&self.me).in_net = false;
        let t_ms = w.now_ms;
        w.mailbox(&self.me).last_call = Some(op);
        w.mailbox(&self.me).completed =
            vec![Step { t_ms, worker: self.me.clone(), op: op.to_string(), service, at, outcome, idle: false, facts, unit: None }];
    }

    fn set_idle(&self, idle: bool) {
        let mut w = self.world.borrow_mut();
        let slot = w.mailbox(&self.me);
        slot.idle = idle;
        // The call that just completed found nothing: its step is an idle poll.
        if let Some(step) = slot.completed.last_mut() {
            step.idle = idle;
        }
    }

    fn count(&self, pg: u32, sqs: u32, redis: u32) {
        let mut w = self.world.borrow_mut();
        w.calls.pg += pg;
        w.calls.sqs += sqs;
        w.calls.redis += redis;
    }

    // ---- PostgreSQL ----

    /// `BEGIN`.
    pub async fn begin(&mut self) -> Result<(), CallError> {
        self.simple("begin", "BEGIN", true).await
    }

    /// `COMMIT`.
    pub async fn commit(&mut self) -> Result<(), CallError> {
        self.simple("commit", "COMMIT", false).await
    }

    /// `ROLLBACK`, if a transaction is open (a no-op otherwise, and no yield).
    pub async fn rollback(&mut self) -> Result<(), CallError> {
        if !self.in_tx {
            return Ok(());
        }
        self.simple("rollback", "ROLLBACK", false).await
    }

    /// A statement without parameters that opens (`in_tx_after`) or closes a transaction. An
    /// injected failure leaves the transaction state as it was: the statement was not sent.
    async fn simple(&mut self, op: &'static str, sql: &str, in_tx_after: bool) -> Result<(), CallError> {
        let fate = self.pg_gate_commit(op, sql, sql == "COMMIT").await?;
        let r = sqlx::raw_sql(sql).execute(self.pg()).await;
        // COMMIT and ROLLBACK end the transaction even when they report an error.
        self.in_tx = in_tx_after && r.is_ok();
        if r.is_ok() && fate == pg_model::Fate::LoseReply {
            return Err(self.pg_fault_error(op, crate::nemesis::pg::COMMIT_REPLY_LOST));
        }
        self.complete(op, Service::Postgres, pg_outcome(r.as_ref().map(|_| Outcome::Done)), vec![]);
        r.map(|_| ()).map_err(Into::into)
    }

    /// The facts of statement `sql` answered `outcome` on this worker's connection: a write
    /// outside a transaction block commits at once ([`pg_model::autocommit_write`]).
    fn autocommit(&self, sql: &str, outcome: &Outcome) -> Vec<Fact> {
        pg_model::autocommit_write(pg_model::first_keyword(sql), outcome, self.in_tx).into_iter().collect()
    }

    /// Completes `op` with the connection error `message` of a PostgreSQL fault.
    fn pg_fault_error(&mut self, op: &'static str, message: &str) -> CallError {
        self.complete(op, Service::Postgres, Outcome::Error { message: message.to_string() }, vec![]);
        CallError::Service(message.to_string())
    }

    /// The gate of a PostgreSQL call `op` that is to send `sql`, then an armed
    /// `pg:connection-reset`: the statement is not sent, the worker's open transaction is rolled
    /// back (as the server does when a connection drops; the ROLLBACK is the harness's, not
    /// counted as the worker's call) and the call fails with
    /// [`crate::nemesis::pg::CONNECTION_RESET`]. A statement that goes out and names
    /// `pg_backend_pid` marks the session ([`names_backend_pid`]).
    async fn pg_gate(&mut self, op: &'static str, sql: &str) -> Result<(), CallError> {
        self.pg_gate_commit(op, sql, false).await.map(|_| ())
    }

    /// [`Cx::pg_gate`] of a statement that is a COMMIT (`commit`) or not: the fate the armed
    /// faults give it ([`pg_model::fate`]). Whether a COMMIT commits is probed when a lost
    /// reply is armed: in an aborted transaction (every statement fails, 25P02) it rolls back.
    /// The probe is the harness's, not counted as the worker's.
    async fn pg_gate_commit(&mut self, op: &'static str, sql: &str, commit: bool) -> Result<pg_model::Fate, CallError> {
        self.gate(op).await?;
        let commits = commit
            && self.world.borrow().pg.armed(PgFault::CommitResponseLost)
            && sqlx::raw_sql("SELECT 1").execute(self.pg()).await.is_ok();
        let fate = pg_model::fate(&mut self.world.borrow_mut().pg, commits);
        if fate == pg_model::Fate::Reset {
            if self.in_tx {
                let _ = sqlx::raw_sql("ROLLBACK").execute(self.pg()).await;
                self.in_tx = false;
            }
            return Err(self.pg_fault_error(op, crate::nemesis::pg::CONNECTION_RESET));
        }
        self.pid_named |= names_backend_pid(sql);
        self.count(1, 0, 0);
        self.set_in_pg(true);
        Ok(fate)
    }

    /// Runs `sql` with `vals` and returns at most one row (`RETURNING …`). A yield point named
    /// `op`; the trace shows `1 row` or `no row`.
    pub async fn fetch_optional(
        &mut self,
        op: &'static str,
        sql: &str,
        vals: &[Val],
    ) -> Result<Option<PgRow>, CallError> {
        self.pg_gate(op, sql).await?;
        let r = bind(sqlx::query(sql), vals, self.now()).fetch_optional(self.pg()).await;
        let outcome = pg_outcome(r.as_ref().map(|o| Outcome::Returned { row: o.is_some() }));
        let facts = self.autocommit(sql, &outcome);
        self.complete(op, Service::Postgres, outcome, facts);
        Ok(r?)
    }

    /// Runs `sql` with `vals` and returns all rows. A yield point named `op`.
    pub async fn fetch_all(&mut self, op: &'static str, sql: &str, vals: &[Val]) -> Result<Vec<PgRow>, CallError> {
        self.pg_gate(op, sql).await?;
        let r = bind(sqlx::query(sql), vals, self.now()).fetch_all(self.pg()).await;
        let outcome = r.as_ref().map(|rows| Outcome::Fetched { n: rows.len() as u64 });
        self.complete(op, Service::Postgres, pg_outcome(outcome), vec![]);
        Ok(r?)
    }

    /// Runs `sql` with `vals` and returns the number of rows affected. A yield point named `op`.
    pub async fn execute(&mut self, op: &'static str, sql: &str, vals: &[Val]) -> Result<u64, CallError> {
        self.pg_gate(op, sql).await?;
        let r = bind(sqlx::query(sql), vals, self.now()).execute(self.pg()).await;
        let outcome = pg_outcome(r.as_ref().map(|d| Outcome::Affected { n: d.rows_affected() }));
        let facts = self.autocommit(sql, &outcome);
        self.complete(op, Service::Postgres, outcome, facts);
        Ok(r?.rows_affected())
    }

    // ---- Providers ----

    /// Sends `request` to the workload's provider `provider` over turmoil's simulated network
    /// and waits 2 s (2000 ms) of turmoil time for the reply; the logical clock does not move.
    /// A yield point named `op`; the trace shows the status, or that no response came. Any
    /// status is `Ok` (a 503 too). Errors: [`CallError::NoResponse`] when the request was lost,
    /// the response was lost, or the provider was unreachable or unknown (the outcome is
    /// unknown); [`CallError::Injected`] when the schedule armed a failure here.
    pub async fn http(&mut self, op: &'static str, provider: &'static str, request: crate::provider::Request) -> Result<crate::provider::Reply, CallError> {
        self.gate(op).await?;
        let dropped = {
            let mut w = self.world.borrow_mut();
            let route = w.net.route_of(provider, &request);
            w.net.take_for(provider, route, |k| k == crate::nemesis::net::NetFaultKind::DropRequest)
        };
        if dropped.is_some() {
            let mut w = self.world.borrow_mut();
            w.net.to_cut.push(super::net::Cut { from: self.me.clone(), to: provider.to_string() });
            w.net.log.push((provider, format!("{} {} from {}: lost on its way, never arrived", request.method, request.target(), self.me)));
        }
        self.world.borrow_mut().mailbox(&self.me).in_net = true;
        let r = super::net::client::call(&self.me, provider, &request).await;
        let outcome = match &r {
            Ok(reply) => Outcome::Http { provider: provider.to_string(), status: reply.status },
            Err(why) => Outcome::NoResponse { provider: provider.to_string(), why: why.clone() },
        };
        self.world.borrow_mut().calls.add(Service::Http);
        self.complete(op, Service::Http, outcome, vec![]);
        r.map_err(CallError::NoResponse)
    }

    // ---- Redis ----

    /// `SET key <token> NX PX ttl_ms`, on the logical clock ([`crate::sim::model::redis`]: the real
    /// server gets the TTL an hour longer, the logical clock expires the key). A yield point
    /// named `op`. Returns the lock's token when it was taken, `None` when the key was held: a
    /// value unique within the schedule (`<worker>.<n>`), to be carried to whoever releases the
    /// lock (Symfony's DeduplicateStamp carries its lock key with the token) and given to
    /// [`Cx::unlock`].
    pub async fn lock(&mut self, op: &'static str, key: &str, ttl_ms: u64) -> Result<Option<String>, CallError> {
        let token = {
            let mut w = self.world.borrow_mut();
            w.lock_tokens += 1;
            format!("{}.{}", self.me, w.lock_tokens)
        };
        let args = ["SET", key, &token, "NX", "PX", &ttl_ms.to_string()].map(String::from).to_vec();
        let reply = self.redis_call(op, args).await?;
        Ok((reply == model::Reply::Ok).then_some(token))
    }

    /// Releases `key` only if it still holds `token` (compare-and-delete in one Lua script,
    /// which Redis runs atomically; the pattern of the Redis documentation's "Distributed locks
    /// with Redis" and of Symfony's RedisStore). A worker whose lock expired and was taken by
    /// another deletes nothing. A yield point named `op`.
    pub async fn unlock(&mut self, op: &'static str, key: &str, token: &str) -> Result<(), CallError> {
        let args = ["EVAL", COMPARE_AND_DELETE, "1", key, token].map(String::from).to_vec();
        self.redis_call(op, args).await.map(|_| ())
    }

    /// `DEL key`, whoever holds it now: a worker whose lock expired deletes the lock another
    /// has taken since (what the invariant "a lock is released only by its holder" catches).
    /// A yield point named `op`.
    pub async fn unlock_unchecked(&mut self, op: &'static str, key: &str) -> Result<(), CallError> {
        self.redis_call(op, vec!["DEL".into(), key.into()]).await.map(|_| ())
    }

    /// One Redis command, `args` with its name first, as a yield point named `op`: sent with
    /// the TTLs the model gives the real server, completed with the outcome and facts the
    /// model reads from the reply (the same as for an external worker's command at the wire
    /// proxy).
    async fn redis_call(&mut self, op: &'static str, args: Vec<String>) -> Result<model::Reply, CallError> {
        self.gate(op).await?;
        self.count(0, 0, 1);
        let mut real = args.clone();
        for (i, v) in model::real_args(&args) {
            real[i] = v;
        }
        let mut reply = self.redis_send(&real).await;
        let mut lost = Vec::new();
        // An armed `redis:lose-lock` takes the first lock asked for in vain: the holder's key
        // goes (the harness's DEL, not counted as the worker's), and the command is sent again.
        if let Some(key) = model::refused_lock(&args, &reply) {
            if self.world.borrow_mut().redis.take(RedisFault::LoseLock) {
                self.redis_send(&["DEL".to_string(), key.to_string()]).await;
                lost.push(Fact::LockLost { key: key.to_string() });
                reply = self.redis_send(&real).await;
            }
        }
        let (outcome, facts) = model::outcome(&args, &reply, 0);
        lost.extend(facts);
        self.complete(op, Service::Redis, outcome, lost);
        match reply {
            model::Reply::Error(e) => Err(CallError::Service(format!("redis {}: {e}", model::name(&args)))),
            reply => Ok(reply),
        }
    }

    /// Sends `args` (its name first) on the worker's Redis connection, as it is: the reply as
    /// the model reads it.
    async fn redis_send(&mut self, args: &[String]) -> model::Reply {
        let mut cmd = redis::cmd(&args[0]);
        for a in &args[1..] {
            cmd.arg(a);
        }
        match cmd.query_async::<redis::Value>(&mut self.redis).await {
            Ok(redis::Value::Nil) => model::Reply::Null,
            Ok(redis::Value::Int(n)) => model::Reply::Int(n),
            Ok(_) => model::Reply::Ok,
            Err(e) => model::Reply::Error(e.to_string()),
        }
    }

    /// Waits, without a yield point, until the scheduler hands this worker new work
    /// (status [`Status::Waiting`]).
    pub(crate) async fn wait_for_work(&mut self) {
        let notify = {
            let mut w = self.world.borrow_mut();
            let slot = w.mailbox(&self.me);
            slot.status = Status::Waiting { at: self.at };
            slot.idle = true;
            slot.notify.clone()
        };
        notify.notified().await;
    }

    /// Marks the worker idle (its last call found nothing to do, e.g. a poll that selected no
    /// rows) or busy. The drain polls an idle worker again only when something it could see
    /// changed, and the trace folds its idle polls. Call it right after the poll's call.
    pub fn idle(&self, idle: bool) {
        self.set_idle(idle);
    }
}

impl Drop for Cx {
    /// The host stops (a crash, a graceful stop, a program that returned, the schedule's end):
    /// a connection with no call under way goes to the shelf
    /// (`crate::namespace::worker_pg::Shelf::leave`), which hands it to a restart after a crash or a
    /// stop, and keeps it at the schedule's end if it is outside a transaction; any other is
    /// closed here, and PostgreSQL rolls back what it had open.
    fn drop(&mut self) {
        let in_call = self.world.try_borrow_mut().map_or(true, |mut w| w.mailbox(&self.me).in_pg);
        if let Some(pg) = self.pg.take().filter(|_| !in_call) {
            self.shelf.leave(pg, self.pid_named, self.in_tx);
        }
    }
}

/// Whether `sql` names `pg_backend_pid` (any case): a session that read its backend's pid may
/// have handed it out as an owner token, which others judge by the pid's presence in
/// `pg_stat_activity`, so its backend must end with its process (never handed to a restart).
fn names_backend_pid(sql: &str) -> bool {
    const NAME: &[u8] = b"pg_backend_pid";
    sql.as_bytes().windows(NAME.len()).any(|w| w.eq_ignore_ascii_case(NAME))
}

fn bind<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    vals: &[Val],
    now: DateTime<Utc>,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    for v in vals {
        q = match v.clone() {
            Val::Uuid(u) => q.bind(u),
            Val::I64(i) => q.bind(i),
            Val::Text(s) => q.bind(s),
            Val::Json(j) => q.bind(j),
            Val::Time(t) => q.bind(t),
            Val::Now => q.bind(now),
            Val::NowMinusS(secs) => q.bind(now - chrono::Duration::seconds(secs as i64)),
        };
    }
    q
}

fn pg_outcome(r: Result<Outcome, &sqlx::Error>) -> Outcome {
    match r {
        Ok(o) => o,
        Err(e) => Outcome::Error {
            message: match e.as_database_error() {
                Some(db) => db.message().to_string(),
                None => e.to_string(),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::names_backend_pid;

    #[test]
    fn a_statement_naming_the_backend_pid_is_seen_in_any_case() {
        assert!(names_backend_pid("UPDATE jobs SET locked_by = pg_backend_pid() WHERE id = $1"));
        assert!(names_backend_pid("select PG_BACKEND_PID()"));
        assert!(!names_backend_pid("SELECT pid FROM pg_stat_activity WHERE client_port = inet_client_port()"));
        assert!(!names_backend_pid("pg_backend_pi"));
    }
}
