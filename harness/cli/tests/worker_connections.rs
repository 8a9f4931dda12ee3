//! The workers' PostgreSQL connections kept between schedules keep the crash
//! semantics: a worker idle at a schedule's end hands its backend to the next schedule of the
//! namespace; a worker crashed inside its transaction or between calls hands its backend,
//! reset as a fresh session (its transaction rolled back), to the next worker to restart,
//! unless its session read its backend's pid: then the backend ends with the process. No
//! session's advisory lock outlives the process that took it. Real services, started once for
//! this test process through the harness.

use std::rc::Rc;

use async_trait::async_trait;
use crashpoint::scenario::{run_scenario, Scenario};
use crashpoint::{testkit, CallError, Cx, Delivery, Handler};
use sqlx::{Connection, Row};

mod common;

/// The session-level advisory lock [`NotesBackend`] takes (PostgreSQL docs §9.27.10): held until
/// its session ends, so a crashed process's lock would show if its session survived.
const SESSION_LOCK: i32 = 4242;

/// Wraps a consumer: before each delivery it finds its backend's pid and start time (µs since
/// the epoch) and how many sessions hold [`SESSION_LOCK`], notes them in the trace as
/// `backend <pid> started <µs> locks <n>`, then tries to take that lock for its session. With
/// `names_pid` it finds its backend through `pg_backend_pid()`, else through its client address
/// and port, so that its session never names its pid.
struct NotesBackend {
    inner: Rc<dyn Handler>,
    names_pid: bool,
}

#[async_trait(?Send)]
impl Handler for NotesBackend {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let mine = match self.names_pid {
            true => "pid = pg_backend_pid()",
            false => "client_addr = inet_client_addr() AND client_port = inet_client_port()",
        };
        let sql = format!(
            "SELECT pid, (extract(epoch FROM backend_start) * 1e6)::bigint, \
             (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = {SESSION_LOCK}) \
             FROM pg_stat_activity WHERE {mine}"
        );
        let row = cx.fetch_optional("backend", &sql, &[]).await?.expect("a backend sees itself in pg_stat_activity");
        cx.note(format!(
            "backend {} started {} locks {}",
            row.get::<i32, _>(0),
            row.get::<i64, _>(1),
            row.get::<i64, _>(2)
        ));
        cx.fetch_optional("session lock", &format!("SELECT pg_try_advisory_lock({SESSION_LOCK})"), &[]).await?;
        self.inner.on_delivery(cx, d).await
    }
}

/// Runs `schedule` of `s` on the payout reference with [`NotesBackend`] around its consumer
/// (naming its pid with `names_pid`); it must pass, and no consumer may see [`SESSION_LOCK`]
/// held when it asks. Returns the backends the consumers noted, in trace order, as (pid, start
/// in µs since the epoch).
fn backends(s: &Scenario, schedule: &str, names_pid: bool) -> Vec<(i32, i64)> {
    let system = match names_pid {
        true => {
            common::payout_with_consumer("notes-backend-pid", |h| Rc::new(NotesBackend { inner: h, names_pid: true }))
        }
        false => {
            common::payout_with_consumer("notes-backend", |h| Rc::new(NotesBackend { inner: h, names_pid: false }))
        }
    };
    let o = run_scenario(&testkit::endpoints(), system, s, Some(&common::schedule(s, schedule))).unwrap();
    assert!(o.passed(), "{:?}\n{}", o.verdicts, o.trace);
    let noted: Vec<(i32, i64, i64)> = o
        .trace
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find("backend ")? + "backend ".len()..];
            let (pid, rest) = rest.split_once(" started ")?;
            let (start, locks) = rest.split_once(" locks ")?;
            Some((pid.trim().parse().ok()?, start.trim().parse().ok()?, locks.trim().parse::<i64>().ok()?))
        })
        .collect();
    assert!(!noted.is_empty(), "no consumer noted its backend:\n{}", o.trace);
    assert!(
        noted.iter().all(|n| n.2 == 0),
        "a session's advisory lock outlived its process (schedule `{schedule}`):\n{}",
        o.trace
    );
    noted.into_iter().map(|(pid, start, _)| (pid, start)).collect()
}

/// Runs `sql` with `args` bound in order ($1, $2, …) on a connection of the test's own, and
/// returns its one value.
fn ask<T>(sql: &str, args: &[i32]) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
{
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut c = sqlx::PgConnection::connect(&testkit::endpoints().database_url).await.unwrap();
        let q = args.iter().fold(sqlx::query_scalar(sql), |q, a| q.bind(*a));
        let v = q.fetch_one(&mut c).await.unwrap();
        c.close().await.unwrap();
        v
    })
}

/// Whether backend `pid` still runs.
fn backend_runs(pid: i32) -> bool {
    ask("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", &[pid])
}

/// The server's clock now, µs since the epoch (the clock `backend_start` is read on).
fn server_now_us() -> i64 {
    ask("SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint", &[])
}

/// Whether backend `pid` is gone within 2 s.
fn ends(pid: i32) -> bool {
    (0..200).any(|_| {
        !backend_runs(pid) || {
            std::thread::sleep(std::time::Duration::from_millis(10));
            false
        }
    })
}

#[test]
fn an_idle_worker_hands_its_backend_on_and_a_crashed_one_leaves_none_or_a_fresh_session() {
    let mut s = common::scenario("windows/crash-after-commit");
    s.expect_trace.clear();
    // The drain alone: a consumer handles e1 and the schedule ends with every worker idle.
    let (first, _) = backends(&s, "", false)[0];
    assert!(backend_runs(first), "the idle worker's backend {first} was closed at the schedule's end");
    let between = server_now_us();
    // The namespace's next schedule (same shape, same thread): its consumer's backend
    // predates it.
    let (second, started) = backends(&s, "", false)[0];
    assert!(
        started < between,
        "backend {second} started after the schedule before ended: a new connection, not a kept one"
    );
    // c1 crashes inside its transaction (after its claim), or between two calls (after its
    // commit), with its session's advisory lock taken: the restarted c1 gets the same backend,
    // reset, and sees no lock held (`backends` checks that); the claim was rolled back, or the
    // redelivery would find it and the payout would be lost (the schedule must pass).
    for at in ["after_claim", "after_commit"] {
        let noted = backends(&s, &format!("p:lock p:send c1:recv c1:crash@{at} c1:restart tick:31s c1:recv"), false);
        assert_eq!(noted.len(), 2, "c1 should handle m1 twice, before and after its restart");
        assert_eq!(
            noted[1].0, noted[0].0,
            "the worker restarted after its crash {at} forked a new backend instead of taking the crashed one's, reset"
        );
    }
    // The same inside the transaction, but the session read its pid (which it could have
    // handed out as an owner token): the crashed process's backend ends with it, and the
    // restart gets another.
    let noted = backends(&s, "p:lock p:send c1:recv c1:crash@after_claim c1:restart tick:31s c1:recv", true);
    assert_eq!(noted.len(), 2, "c1 should handle m1 twice, before and after its restart");
    assert_ne!(noted[1].0, noted[0].0, "a session that read its pid handed its backend to the restarted worker");
    assert!(ends(noted[0].0), "the backend {} of a crashed session that read its pid still runs", noted[0].0);
}
