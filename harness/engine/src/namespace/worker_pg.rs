//! The workers' PostgreSQL connections, kept between the schedules of one namespace.
//!
//! Forking a backend for every worker of every schedule was about half of PostgreSQL's CPU in
//! `crashpoint bench` (perf: backend start and exit, page faults of a fresh
//! process, the relation files and catalog caches each new backend loads). So a connection a
//! worker still holds, idle and outside a transaction, when its schedule ends is reset as a
//! fresh session ([`reset`]: `DISCARD ALL` but for sqlx's prepared statements) and kept with the namespace ([`super::pool`]) for
//! the workers of the namespace's next schedule, which check it first ([`alive`]).
//!
//! A crash or a graceful stop mid-schedule ends the process's session. When the worker was
//! inside a call (a statement sent, its answer not yet read), its connection is closed and its
//! backend terminated, so PostgreSQL rolls back what it had open, as for a killed pod. When no
//! call was under way, inside a transaction or not, its connection is reset as a fresh session
//! at that moment ([`Shelf::catching`], [`reset`]: a `ROLLBACK` first if a transaction is
//! open): no lock, setting, temporary table or transaction of the ended process survives, as
//! when its backend exits, and the next worker to restart takes it instead of forking a
//! backend (about 4 ms of PostgreSQL's CPU each, and the catalog caches a new backend loads).
//! What still differs from an exit: the backend's pid stays in `pg_stat_activity`. So a
//! session whose statements named `pg_backend_pid` (it may have handed its pid out as an owner
//! token, judged dead by its absence) is closed and terminated as before. A program that
//! returns closes its connection; a restarted worker with no such connection left connects
//! anew ([`Shelf::started`]). Connections are made on
//! one long-lived I/O runtime ([`crate::services::clients::io_runtime`]) rather than on the turmoil host's: a host's runtime is
//! dropped when its schedule ends, and a socket registered with a dropped runtime's reactor
//! cannot be used again. The host's tasks still poll the socket; the I/O runtime's thread runs
//! the connects, the resets and the checks, and otherwise waits on readiness and wakes them.
//!
//! What differs from a fresh session: sqlx's prepared statements and the plans cached with
//! them, and those of PL/pgSQL functions, are kept ([`RESET_SESSION`]; every plan is made the
//! same way whatever the connection ran before, [`PLAN_CACHE_MODE`]); and a custom setting
//! (`SET app.x = …`) once set reads as `''` rather than NULL through
//! `current_setting('app.x', true)` (PostgreSQL keeps the placeholder, even through
//! `DISCARD ALL`).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection, Row};

/// Kept connections beyond this many, across all the namespaces of one process (those taken
/// by running schedules included), are closed when a namespace goes back to the pool, the
/// pooled namespace unused longest first ([`super::pool::give_back`]); until then running
/// schedules may keep a few more. Under PostgreSQL's default `max_connections` (100; 300 in
/// `crashpoint up`'s server) with room for the admin connections (2 per pooled namespace) and
/// for the schedules running meanwhile; enough for 4 slots of 8 workers.
pub const KEPT_MAX: usize = 40;

/// How long [`reset`] and [`alive`] wait for one connection (2 s): one that has not answered
/// by then is closed, so that a PostgreSQL that stopped answering without closing its sockets
/// cannot hold the slot.
const ANSWER_MAX: Duration = Duration::from_secs(2);

/// Kept connections now: idle with a namespace, on a shelf, or taken by a worker again.
static KEPT: AtomicUsize = AtomicUsize::new(0);

/// Connections kept now by this process (idle, or taken by a worker again).
pub fn kept() -> usize {
    KEPT.load(Ordering::Relaxed)
}

/// A worker's connection and its backend's process id (for `pg_blocking_pids`).
pub struct WorkerPg {
    /// The connection; its `search_path` is the namespace's schema (a startup parameter, so
    /// `DISCARD ALL`'s `RESET ALL` keeps it: PostgreSQL docs, "RESET").
    pub conn: PgConnection,
    /// `pg_backend_pid()` of the connection.
    pub pid: i32,
    /// Whether it counts in [`KEPT`].
    counted: bool,
}

impl Drop for WorkerPg {
    fn drop(&mut self) {
        if self.counted {
            KEPT.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The workers' `plan_cache_mode` (PostgreSQL docs, "Query Planning"; a startup parameter,
/// so `RESET ALL` keeps it): a prepared statement is planned once, without its parameters'
/// values, and planned again only when a relation it reads changed (a TRUNCATE between
/// schedules). With the default (`auto`) a statement's first five executions are planned for
/// their values and later ones may take the generic plan, so the plan, and with it the order of
/// rows a query without `ORDER BY` returns, would change with how many schedules a kept
/// connection served, which depends on `--jobs`. Measured (release bench,
/// payout/explore, 40 schedules, 1 slot, PostgreSQL's own statement times): Bind took 223 ms
/// in all with this mode, 282 ms with `force_custom_plan`.
pub const PLAN_CACHE_MODE: &str = "force_generic_plan";

/// Connects with `opts` (and [`PLAN_CACHE_MODE`]) on the I/O runtime and asks the backend's
/// pid. Awaitable from any runtime (a turmoil host's). Errors: the connection's or the query's.
pub async fn connect(opts: PgConnectOptions) -> anyhow::Result<WorkerPg> {
    let opts = opts.options([("plan_cache_mode", PLAN_CACHE_MODE)]);
    crate::services::clients::io_runtime().spawn(async move {
        let mut conn = opts.connect().await?;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut conn).await?;
        anyhow::Ok(WorkerPg { conn, pid, counted: false })
    })
    .await?
}

/// Runs `op` on every connection at once (each on its own backend, so the wait is that of the
/// slowest connection, not the sum), on the I/O runtime, blocking this thread (not a
/// runtime's) for at most [`ANSWER_MAX`]. Returns, in order, those whose `op` succeeded in
/// time; the others are closed.
fn each_at_once<F, Fut>(conns: Vec<WorkerPg>, what: &str, op: F) -> Vec<WorkerPg>
where
    F: Fn(WorkerPg) -> Fut,
    Fut: Future<Output = Result<WorkerPg, sqlx::Error>>,
{
    if conns.is_empty() {
        return conns;
    }
    // The timers are made inside the runtime: they need its clock.
    let all = async { futures_util::future::join_all(conns.into_iter().map(|c| tokio::time::timeout(ANSWER_MAX, op(c)))).await };
    crate::services::clients::io_runtime().block_on(all)
        .into_iter()
        .filter_map(|r| match r {
            Ok(Ok(c)) => Some(c),
            Ok(Err(e)) => {
                tracing::debug!("closing a kept worker connection: {what} failed: {e}");
                None
            }
            Err(_) => {
                tracing::debug!("closing a kept worker connection: {what} took over {ANSWER_MAX:?}");
                None
            }
        })
        .collect()
}

/// What [`reset`] sends: `DISCARD ALL` (PostgreSQL docs, "DISCARD") without its `DEALLOCATE
/// ALL` and `DISCARD PLANS`, then the counts of statements prepared by SQL (`PREPARE` by the
/// workload) and through the protocol (sqlx's: `pg_prepared_statements.from_sql`). One simple
/// query, so one round trip, which PostgreSQL runs as one implicit transaction. Its first statement fails (division by zero) inside a
/// transaction a worker left open, where `now()`, the transaction's start, is before
/// `statement_timestamp()` (docs §9.9.5): the rest would run inside that transaction.
const RESET_SESSION: &str = "SELECT 1 / (now() = statement_timestamp())::int; \
    CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; UNLISTEN *; SELECT pg_advisory_unlock_all(); \
    DISCARD TEMP; DISCARD SEQUENCES; \
    SELECT count(*) FILTER (WHERE from_sql), count(*) FILTER (WHERE NOT from_sql) FROM pg_prepared_statements";

/// Puts the sessions of connections left at a schedule's end back as fresh ones
/// ([`RESET_SESSION`]): no cursor, setting, listener, advisory lock, temporary table or
/// sequence state survives, nor any statement the workload prepared itself. sqlx's prepared
/// statements survive, with its cache of them: the next schedule's workers send the same
/// statements, and preparing them anew for each schedule was a Parse round trip per statement
/// and worker (18 a schedule in payout/explore, against 6 when kept). When the server holds a
/// statement prepared by SQL, or not exactly as many protocol-prepared ones as sqlx's cache
/// (the workload ran `DEALLOCATE` or `DISCARD ALL` itself), a `DISCARD ALL` follows and sqlx's
/// cache is cleared. A statement's result does not depend on what the connection ran before:
/// the rows are the namespace's, and its plan is made the same way ([`PLAN_CACHE_MODE`]),
/// again after a TRUNCATE of what it reads. When a transaction
/// was left open, a `ROLLBACK` and the reset again follow; a session outside a transaction,
/// the usual case, takes one round trip and no `ROLLBACK`, which PostgreSQL would log as a
/// warning ("there is no transaction in progress"). Returns those whose reset succeeded; see
/// [`each_at_once`].
pub fn reset(kept: Vec<WorkerPg>) -> Vec<WorkerPg> {
    each_at_once(kept, "its session reset", |mut c| async move {
        let rows = match sqlx::raw_sql(RESET_SESSION).fetch_all(&mut c.conn).await {
            Ok(rows) => rows,
            Err(_) => {
                sqlx::raw_sql("ROLLBACK").execute(&mut c.conn).await?;
                sqlx::raw_sql(RESET_SESSION).fetch_all(&mut c.conn).await?
            }
        };
        let (by_sql, by_protocol): (i64, i64) = match rows.last() {
            Some(r) => (r.try_get(0)?, r.try_get(1)?),
            None => (0, 0),
        };
        if by_sql > 0 || by_protocol != c.conn.cached_statements_size() as i64 {
            sqlx::raw_sql("DISCARD ALL").execute(&mut c.conn).await?;
            c.conn.clear_cached_statements().await?;
        }
        Ok(c)
    })
}

/// Kept connections that still answer (sqlx's `ping`), before a schedule hands them out: one
/// whose backend is gone (PostgreSQL restarted, the backend terminated) is closed rather than
/// fail a worker's first call. See [`each_at_once`].
pub fn alive(kept: Vec<WorkerPg>) -> Vec<WorkerPg> {
    each_at_once(kept, "its ping", |mut c| async move {
        c.conn.ping().await?;
        Ok(c)
    })
}

/// One schedule's connections: those kept from the namespace's schedule before, taken by its
/// workers as they start; those of workers crashed or stopped with no call under way, reset and
/// taken by restarts ([`Shelf::catching`]); and, once [`Shelf::collect`] was called at the
/// schedule's end, those its workers leave idle.
#[derive(Default)]
pub struct Shelf {
    kept: RefCell<Vec<WorkerPg>>,
    /// Kept connections no worker took at the start: a restart does not get them.
    spare: RefCell<Vec<WorkerPg>>,
    collecting: Cell<bool>,
    /// While [`Shelf::catching`] runs: the connections hosts leave idle, caught instead of
    /// closed.
    caught: RefCell<Option<Vec<WorkerPg>>>,
}

impl Shelf {
    /// A shelf holding `kept` (reset and checked already).
    pub fn new(kept: Vec<WorkerPg>) -> Shelf {
        Shelf { kept: RefCell::new(kept), ..Shelf::default() }
    }

    /// A kept connection for a starting worker, if one is left.
    pub fn take(&self) -> Option<WorkerPg> {
        self.kept.borrow_mut().pop()
    }

    /// Every worker has started: the connections none took are set aside until the schedule's
    /// end, so that a restart takes only a connection reset during this schedule
    /// ([`Shelf::give`]) or connects anew.
    pub fn started(&self) {
        let rest = std::mem::take(&mut *self.kept.borrow_mut());
        self.spare.borrow_mut().extend(rest);
    }

    /// From now on (the schedule's end), connections left with [`Shelf::leave`] are kept.
    pub fn collect(&self) {
        self.collecting.set(true);
    }

    /// Runs `stop`, which ends hosts mid-schedule (a crash or a graceful stop), and returns
    /// the connections those hosts left with no call under way ([`Shelf::leave`]), instead of
    /// closing them. The caller resets them as fresh sessions ([`reset`]) and hands those back
    /// with [`Shelf::give`], or closes them.
    pub fn catching(&self, stop: impl FnOnce()) -> Vec<WorkerPg> {
        *self.caught.borrow_mut() = Some(Vec::new());
        stop();
        self.caught.borrow_mut().take().unwrap_or_default()
    }

    /// Connections reset as fresh sessions mid-schedule ([`Shelf::catching`]): the next
    /// hosts to start (restarts) take them before connecting anew.
    pub fn give(&self, reset: Vec<WorkerPg>) {
        self.kept.borrow_mut().extend(reset);
    }

    /// The connection of a worker whose host stops with no call under way: caught during
    /// [`Shelf::catching`] (a crash or a graceful stop) unless its session named its backend's
    /// pid (`pid_named`: the pid may be someone's token for the ended process, so the backend
    /// must end too); kept at the schedule's end ([`Shelf::collect`]) if outside a transaction
    /// (`in_tx` false); closed otherwise (a program that returned).
    pub fn leave(&self, mut c: WorkerPg, pid_named: bool, in_tx: bool) {
        let catching = self.caught.borrow().is_some();
        if (catching && pid_named) || (!catching && (in_tx || !self.collecting.get())) {
            return;
        }
        if !c.counted {
            KEPT.fetch_add(1, Ordering::Relaxed);
            c.counted = true;
        }
        match self.caught.borrow_mut().as_mut() {
            Some(caught) => caught.push(c),
            None => self.kept.borrow_mut().push(c),
        }
    }

    /// Everything on the shelf, for the namespace to keep.
    pub fn drain(&self) -> Vec<WorkerPg> {
        let mut all = std::mem::take(&mut *self.kept.borrow_mut());
        all.append(&mut self.spare.borrow_mut());
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::clients;
    use crate::namespace::pool;

    /// Whether backend `pid` is still there (as seen from `admin`'s pool).
    fn backend_alive(a: &crate::namespace::admin::Admin, pid: i32) -> bool {
        a.rt.block_on(sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)").bind(pid).fetch_one(&a.pg)).unwrap()
    }

    #[test]
    fn a_kept_connection_serves_the_next_schedule_with_a_fresh_session_and_one_left_mid_schedule_closes() {
        let e = crate::testkit::endpoints();
        let ddl = format!("CREATE TABLE t (v int); -- worker_pg test {}", pool::unique_namespace());
        let mut a = pool::take(&e, &ddl, &[], crate::namespace::admin::SqlClock::Off).unwrap();
        let opts = clients::pg_options(&e.database_url).unwrap().options([("search_path", a.schema.as_str())]);
        let mut c = a.rt.block_on(connect(opts.clone())).unwrap();
        let pid = c.pid;
        let count = "SELECT count(*) FROM t";
        // A schedule's worker: a row, a statement sqlx prepares and caches, and session state
        // a next schedule must not see, down to a transaction left open.
        a.rt.block_on(async {
            sqlx::raw_sql("INSERT INTO t VALUES (1)").execute(&mut c.conn).await.unwrap();
            assert_eq!(sqlx::query_scalar::<_, i64>(count).fetch_one(&mut c.conn).await.unwrap(), 1);
            sqlx::raw_sql(
                "SELECT pg_advisory_lock(42); SET application_name = 'left behind'; CREATE TEMP TABLE scratch (v int); \
                 PREPARE mine AS SELECT 1; SET search_path = public",
            )
            .execute(&mut c.conn)
            .await
            .unwrap();
            sqlx::raw_sql(&format!("BEGIN; INSERT INTO {}.t VALUES (2)", a.schema)).execute(&mut c.conn).await.unwrap();
        });
        // The schedule ends with the worker's host stopped: its connection is kept and reset
        // (as `Run::finish` does), then checked and handed on (as `Run::start` does).
        let shelf = Shelf::new(Vec::new());
        shelf.collect();
        shelf.leave(c, false, false);
        a.kept = reset(shelf.drain());
        assert_eq!(a.kept.len(), 1);
        let state: String = a.rt.block_on(sqlx::query_scalar("SELECT state FROM pg_stat_activity WHERE pid = $1").bind(pid).fetch_one(&a.pg)).unwrap();
        assert_eq!(state, "idle", "the transaction left open was not rolled back");
        pool::give_back(a, &[], true);
        let mut b = pool::take(&e, &ddl, &[], crate::namespace::admin::SqlClock::Off).unwrap();
        let mut c = alive(std::mem::take(&mut b.kept)).pop().expect("the connection was not kept with the namespace");
        assert_eq!(c.pid, pid, "another backend came back");
        type Session = (i64, String, Option<String>, String, i64);
        let ((locks, app, temp, path, prepared), rows): (Session, Result<i64, sqlx::Error>) = b.rt.block_on(async {
            let state = sqlx::query_as(
                "SELECT (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()), \
                 current_setting('application_name'), to_regclass('pg_temp.scratch')::text, current_setting('search_path'), \
                 (SELECT count(*) FROM pg_prepared_statements)",
            );
            let state = state.fetch_one(&mut c.conn).await.unwrap();
            // The workload's own `PREPARE` made the reset discard every statement, and sqlx's
            // cache with them: the statement is prepared anew.
            (state, sqlx::query_scalar(count).fetch_one(&mut c.conn).await)
        });
        assert_eq!(locks, 0, "the advisory lock survived");
        assert_ne!(app, "left behind", "a setting survived");
        assert_eq!(temp, None, "the temporary table survived");
        assert_eq!(path, b.schema, "the search_path is not the namespace's");
        assert_eq!(prepared, 1, "prepared statements survived (only the check's own is expected)");
        assert_eq!(rows.expect("a statement failed after the reset"), 0, "the schedule's rows survived");
        // A schedule that prepared nothing itself: sqlx's statements survive the reset, with
        // its cache (no new Parse), and still read the namespace's rows as they are now.
        b.rt.block_on(sqlx::raw_sql("INSERT INTO t VALUES (3)").execute(&mut c.conn)).unwrap();
        let mut c = reset(vec![c]).pop().expect("the reset failed");
        let (kept, mode, rows): (i64, String, i64) = b.rt.block_on(async {
            let kept = sqlx::query_scalar("SELECT count(*) FROM pg_prepared_statements WHERE statement = $1").bind(count);
            let kept = kept.fetch_one(&mut c.conn).await.unwrap();
            let mode = sqlx::query_scalar("SELECT current_setting('plan_cache_mode')").fetch_one(&mut c.conn).await.unwrap();
            sqlx::raw_sql(&format!("TRUNCATE {}.t", b.schema)).execute(&b.pg).await.unwrap();
            (kept, mode, sqlx::query_scalar(count).fetch_one(&mut c.conn).await.unwrap())
        });
        assert_eq!(kept, 1, "sqlx's statement did not survive the reset");
        assert_eq!(mode, PLAN_CACHE_MODE, "the plan cache mode did not survive the reset");
        assert_eq!(rows, 0, "a kept statement read rows a TRUNCATE removed");
        // A workload that dropped sqlx's statements on the server behind its back: the reset
        // clears sqlx's cache too, so the next schedule's statements are prepared anew.
        b.rt.block_on(sqlx::raw_sql("DEALLOCATE ALL").execute(&mut c.conn)).unwrap();
        let mut c = reset(vec![c]).pop().expect("the reset failed");
        let rows: Result<i64, sqlx::Error> = b.rt.block_on(sqlx::query_scalar(count).fetch_one(&mut c.conn));
        assert!(rows.is_ok(), "a statement sqlx still had cached failed after the workload's DEALLOCATE ALL: {rows:?}");
        // A host that stops mid-schedule outside `Shelf::catching` (a program that returned)
        // leaves nothing: its connection closes.
        let mid = Shelf::new(Vec::new());
        mid.leave(c, false, false);
        assert!(mid.drain().is_empty());
        let gone = (0..200).any(|_| !backend_alive(&b, pid) || {
            std::thread::sleep(std::time::Duration::from_millis(10));
            false
        });
        assert!(gone, "backend {pid} still runs 2 s after its connection was dropped");
        pool::give_back(b, &[], false);
    }
}
