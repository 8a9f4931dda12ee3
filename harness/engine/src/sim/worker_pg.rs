//! The workers' PostgreSQL connections, kept between the schedules of one namespace.
//!
//! Forking a backend for every worker of every schedule was about half of PostgreSQL's CPU in
//! `crashpoint bench` (perf, 2026-12-01: backend start and exit, page faults of a fresh
//! process, the relation files and catalog caches each new backend loads). So a connection a
//! worker still holds, idle, when its schedule ends is kept with the namespace
//! ([`super::pool`]) and handed to a worker of the namespace's next schedule, after
//! [`reset`] has put its session back as a fresh one would be.
//!
//! What does not change: a crash drops the host's runtime with its connection, so the socket
//! closes and PostgreSQL rolls back the open transaction itself (a crashed worker's connection
//! is never kept), and a restart connects anew. Connections are made on one long-lived I/O
//! runtime ([`io`]) rather than on the turmoil host's: a host's runtime is dropped when its
//! schedule ends, and a socket registered with a dropped runtime's reactor cannot be used
//! again. The host's tasks still poll the socket; the I/O runtime's thread only waits on
//! readiness and wakes them.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, PgConnection};

/// At most this many connections are kept idle by one process, across all its namespaces:
/// under PostgreSQL's `max_connections` (100 by default; 300 in `crashpoint up`'s server) with
/// room for the schedules running meanwhile. A connection past it is closed as before.
pub const KEPT_MAX: usize = 64;

/// Connections kept now (idle in a namespace or on a shelf).
static KEPT: AtomicUsize = AtomicUsize::new(0);

/// What [`reset`] runs: everything `DISCARD ALL` does (PostgreSQL docs, "DISCARD") except
/// `DEALLOCATE ALL`, so that sqlx's cache of prepared statements stays valid (the statements
/// name the namespace's tables, which a reset empties but keeps), after a `ROLLBACK` of any
/// transaction left open (a warning only when none is).
const RESET_SQL: &str = "ROLLBACK; CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; UNLISTEN *; \
    SELECT pg_advisory_unlock_all(); DISCARD PLANS; DISCARD TEMP; DISCARD SEQUENCES";

/// The runtime every worker connection is registered with: one thread that waits on socket
/// readiness for all slots, and lives as long as the process.
fn io() -> &'static tokio::runtime::Runtime {
    static IO: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    IO.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("crashpoint-pg-io")
            .enable_all()
            .build()
            .expect("starting the runtime of the workers' PostgreSQL connections")
    })
}

/// A worker's connection and its backend's process id (for `pg_blocking_pids`).
pub struct WorkerPg {
    /// The connection; its `search_path` is the namespace's schema (a startup parameter, so
    /// `RESET ALL` keeps it).
    pub conn: PgConnection,
    /// `pg_backend_pid()` of the connection.
    pub pid: i32,
    /// Whether it counts against [`KEPT_MAX`].
    counted: bool,
}

impl Drop for WorkerPg {
    fn drop(&mut self) {
        if self.counted {
            KEPT.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Connects with `opts` on the I/O runtime and asks the backend's pid. Awaitable from any
/// runtime (a turmoil host's). Errors: the connection's or the query's.
pub async fn connect(opts: PgConnectOptions) -> anyhow::Result<WorkerPg> {
    io().spawn(async move {
        let mut conn = opts.connect().await?;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut conn).await?;
        anyhow::Ok(WorkerPg { conn, pid, counted: false })
    })
    .await?
}

/// Puts kept connections' sessions back as fresh ones are ([`RESET_SQL`]): no open
/// transaction, cursor, setting, listener, advisory lock, temporary table or sequence state
/// of the schedule before. Blocks this thread (not a runtime's). Returns those whose reset
/// succeeded; the others are closed.
pub fn reset(kept: Vec<WorkerPg>) -> Vec<WorkerPg> {
    if kept.is_empty() {
        return kept;
    }
    io().block_on(async {
        let mut ok = Vec::with_capacity(kept.len());
        for mut c in kept {
            match sqlx::raw_sql(RESET_SQL).execute(&mut c.conn).await {
                Ok(_) => ok.push(c),
                Err(e) => tracing::debug!("closing a kept worker connection whose reset failed: {e}"),
            }
        }
        ok
    })
}

/// One schedule's connections: those kept from the namespace's schedule before, taken by its
/// workers as they start, and, once [`Shelf::collect`] was called at the schedule's end,
/// those its workers leave idle.
#[derive(Default)]
pub struct Shelf {
    kept: RefCell<Vec<WorkerPg>>,
    collecting: Cell<bool>,
}

impl Shelf {
    /// A shelf holding `kept` (reset already).
    pub fn new(kept: Vec<WorkerPg>) -> Shelf {
        Shelf { kept: RefCell::new(kept), collecting: Cell::new(false) }
    }

    /// A kept connection for a starting worker, if one is left.
    pub fn take(&self) -> Option<WorkerPg> {
        self.kept.borrow_mut().pop()
    }

    /// From now on (the schedule's end), connections left with [`Shelf::leave`] are kept.
    pub fn collect(&self) {
        self.collecting.set(true);
    }

    /// A worker's idle connection as its host stops: kept when the schedule is ending and
    /// fewer than [`KEPT_MAX`] are kept, closed otherwise (a crash, a restart).
    pub fn leave(&self, mut c: WorkerPg) {
        if !self.collecting.get() {
            return;
        }
        let counted = c.counted || KEPT.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < KEPT_MAX).then_some(n + 1)).is_ok();
        if counted {
            c.counted = true;
            self.kept.borrow_mut().push(c);
        }
    }

    /// Everything on the shelf, for the namespace to keep.
    pub fn drain(&self) -> Vec<WorkerPg> {
        std::mem::take(&mut *self.kept.borrow_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::clients;
    use crate::sim::pool;

    /// Whether backend `pid` is still there (as seen from `admin`'s pool).
    fn backend_alive(a: &crate::sim::admin::Admin, pid: i32) -> bool {
        a.rt.block_on(sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)").bind(pid).fetch_one(&a.pg)).unwrap()
    }

    #[test]
    fn a_kept_connection_serves_the_next_schedule_with_a_fresh_session_and_one_left_mid_schedule_closes() {
        let e = crate::testkit::endpoints();
        let ddl = format!("CREATE TABLE t (v int); -- worker_pg test {}", pool::unique_namespace());
        let mut a = pool::take(&e, &ddl, &[], false).unwrap();
        let opts = clients::pg_options(&e.database_url).unwrap().options([("search_path", a.schema.as_str())]);
        let mut c = a.rt.block_on(connect(opts.clone())).unwrap();
        let pid = c.pid;
        let count = "SELECT count(*) FROM t";
        // A schedule's worker: a row, a statement sqlx prepares and caches, and session state
        // a next schedule must not see.
        a.rt.block_on(async {
            sqlx::raw_sql("INSERT INTO t VALUES (1)").execute(&mut c.conn).await.unwrap();
            assert_eq!(sqlx::query_scalar::<_, i64>(count).fetch_one(&mut c.conn).await.unwrap(), 1);
            sqlx::raw_sql(
                "SELECT pg_advisory_lock(42); SET application_name = 'left behind'; CREATE TEMP TABLE scratch (v int); \
                 SET search_path = public",
            )
            .execute(&mut c.conn)
            .await
            .unwrap();
        });
        // The schedule ends with the worker idle: its connection is kept, reset and handed on.
        let shelf = Shelf::new(Vec::new());
        shelf.collect();
        shelf.leave(c);
        a.kept = shelf.drain();
        assert_eq!(a.kept.len(), 1);
        pool::give_back(a, &[], true);
        let mut b = pool::take(&e, &ddl, &[], false).unwrap();
        let mut c = b.kept.pop().expect("the connection was not kept with the namespace");
        assert_eq!(c.pid, pid, "another backend came back");
        let ((locks, app, temp, path), rows): ((i64, String, Option<String>, String), Result<i64, sqlx::Error>) = b.rt.block_on(async {
            let state = sqlx::query_as(
                "SELECT (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()), \
                 current_setting('application_name'), to_regclass('pg_temp.scratch')::text, current_setting('search_path')",
            );
            let state = state.fetch_one(&mut c.conn).await.unwrap();
            // The cached prepared statement still runs, on the emptied table.
            (state, sqlx::query_scalar(count).fetch_one(&mut c.conn).await)
        });
        assert_eq!(locks, 0, "the advisory lock survived");
        assert_ne!(app, "left behind", "a setting survived");
        assert_eq!(temp, None, "the temporary table survived");
        assert_eq!(path, b.schema, "the search_path is not the namespace's");
        assert_eq!(rows.expect("the cached statement failed after the reset"), 0, "the schedule's row survived");
        // A host that stops mid-schedule (a crash) leaves nothing: its connection closes.
        let mid = Shelf::new(Vec::new());
        mid.leave(c);
        assert!(mid.drain().is_empty());
        let gone = (0..200).any(|_| !backend_alive(&b, pid) || {
            std::thread::sleep(std::time::Duration::from_millis(10));
            false
        });
        assert!(gone, "backend {pid} still runs 2 s after its connection was dropped");
        pool::give_back(b, &[], false);
    }
}
