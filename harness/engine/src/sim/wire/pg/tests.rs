//! The PostgreSQL proxy against a real server: sqlx, psql and a hand-written client.

use std::cell::RefCell;
use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use sqlx::{Connection, PgConnection};

use super::*;

const FAILURE: &str = "injected failure at the gate";
/// Bind + Execute + Sync of the unnamed statement, no parameters.
const BIND_EXECUTE_SYNC: &[(u8, &[u8])] = &[(b'B', &[0; 8]), (b'E', &[0; 5]), (b'S', b"")];

/// A gate that admits everything and records what the proxy reports; it fails the calls
/// mentioning `fail_on`, holds forever those mentioning `stall_on`, loses the reply of those
/// mentioning `lose_on` and resets the connection of those mentioning `reset_on`.
#[derive(Default)]
struct Recorder {
    fail_on: Option<&'static str>,
    stall_on: Option<&'static str>,
    lose_on: Option<&'static str>,
    reset_on: Option<&'static str>,
    dropped: RefCell<Vec<(PgCall, String)>>,
    refused: RefCell<Vec<String>>,
    backends: RefCell<Vec<i32>>,
    replies: RefCell<Vec<(PgCall, PgReply)>>,
}

fn mentions(call: &PgCall, marker: Option<&str>) -> bool {
    marker.is_some_and(|m| call.sql.iter().any(|s| s.contains(m)))
}

#[async_trait(?Send)]
impl PgGate for Recorder {
    fn refused(&self, why: String) {
        self.refused.borrow_mut().push(why)
    }
    fn backend(&self, pid: i32) {
        self.backends.borrow_mut().push(pid)
    }
    fn gated(&self, _call: &PgCall) -> bool {
        true
    }
    async fn hold(&self, _pid: i32, call: &PgCall) -> Admit {
        if mentions(call, self.stall_on) {
            std::future::pending::<()>().await
        }
        if mentions(call, self.lose_on) {
            return Admit::LoseReply;
        }
        if mentions(call, self.reset_on) {
            return Admit::Reset;
        }
        match mentions(call, self.fail_on) {
            true => Admit::Fail(FAILURE.into()),
            false => Admit::Forward,
        }
    }
    fn replied(&self, _pid: i32, call: &PgCall, reply: PgReply) {
        self.replies.borrow_mut().push((call.clone(), reply))
    }
    fn dropped(&self, _pid: i32, call: &PgCall, message: &str) {
        self.dropped.borrow_mut().push((call.clone(), message.to_string()))
    }
}

impl Recorder {
    /// The reply to the last call whose SQL is exactly `sql`.
    fn reply_to(&self, sql: &str) -> PgReply {
        let replies = self.replies.borrow();
        let found = replies.iter().rev().find(|(call, _)| call.sql == [sql]);
        found.unwrap_or_else(|| panic!("no reply to {sql:?} in {replies:#?}")).1.clone()
    }
}

fn database_url() -> url::Url {
    url::Url::parse(&crate::testkit::endpoints().database_url).unwrap()
}

/// Runs `test(proxy_port)` on a current-thread runtime, in a LocalSet next to a proxy in
/// front of the test PostgreSQL.
fn with_proxy<Fut: Future<Output = ()>>(gate: Rc<Recorder>, test: impl FnOnce(u16) -> Fut) {
    let url = database_url();
    let upstream = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    tokio::task::LocalSet::new().block_on(&rt, async move {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::task::spawn_local(serve(listener, upstream, gate));
        let test = tokio::time::timeout(Duration::from_secs(60), test(port));
        test.await.expect("test timed out");
    });
}

async fn direct() -> PgConnection {
    PgConnection::connect(database_url().as_str()).await.unwrap()
}

async fn proxied(port: u16) -> PgConnection {
    let opts = PgConnectOptions::from_str(database_url().as_str()).unwrap();
    let opts = opts.host("127.0.0.1").port(port).ssl_mode(PgSslMode::Prefer);
    PgConnection::connect_with(&opts).await.unwrap()
}

/// Runs `sql` as a simple Query.
async fn exec(c: &mut PgConnection, sql: &str) {
    sqlx::raw_sql(sql).execute(c).await.unwrap();
}

/// The integer that `sql` (a parameterised statement with one text parameter) returns.
async fn int(c: &mut PgConnection, sql: &str, arg: impl ToString) -> i64 {
    let query = sqlx::query_scalar(sql).bind(arg.to_string());
    query.fetch_one(c).await.unwrap()
}

/// The proxy's URL for libpq, with `sslmode`.
fn proxy_url(port: u16, sslmode: &str) -> String {
    let mut url = database_url();
    url.set_host(Some("127.0.0.1")).unwrap();
    url.set_port(Some(port)).unwrap();
    url.query_pairs_mut().append_pair("sslmode", sslmode);
    url.to_string()
}

/// Runs psql (at /usr/bin/psql on this machine: a missing psql fails the test).
async fn psql(url: &str, sql: &str) -> std::process::Output {
    let mut cmd = tokio::process::Command::new("psql");
    cmd.args(["-X", "-tA", "-c", sql, url]).env("PGCONNECT_TIMEOUT", "10");
    cmd.output().await.expect("psql must be on PATH")
}

/// Waits up to 2 s for `done` (the proxy runs on the same thread meanwhile).
async fn eventually(mut done: impl AsyncFnMut() -> bool) -> bool {
    for _ in 0..40 {
        if done().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// A minimal client for what sqlx never sends (Flush, CancelRequest); trust authentication.
struct Raw {
    wire: Wire,
    pid: i32,
    key: Vec<u8>,
}

impl Raw {
    async fn connect(port: u16) -> Raw {
        let url = database_url();
        let db = url.path().trim_start_matches('/');
        let params = format!("user\0{}\0database\0{db}\0\0", url.username());
        let body = [&196608i32.to_be_bytes()[..], params.as_bytes()].concat(); // protocol 3.0
        let packet = [&(body.len() as i32 + 4).to_be_bytes()[..], &body].concat();
        let sock = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut raw = Raw { wire: Wire::new(sock), pid: 0, key: vec![] };
        raw.wire.sock.write_all(&packet).await.unwrap();
        for (tag, body) in raw.until(b'Z').await {
            if tag == b'K' {
                raw.pid = i32::from_be_bytes(body[..4].try_into().unwrap());
                raw.key = body[4..].to_vec();
            }
        }
        raw
    }

    async fn send(&mut self, messages: &[(u8, &[u8])]) {
        let out: Vec<u8> = messages.iter().flat_map(|(tag, body)| frame(*tag, body)).collect();
        self.wire.sock.write_all(&out).await.unwrap();
    }

    /// The server's messages up to and including the first one tagged `tag`.
    async fn until(&mut self, tag: u8) -> Vec<(u8, Vec<u8>)> {
        let mut got = vec![];
        loop {
            while let Some(n) = frame_len(&self.wire.buf).unwrap() {
                let m = self.wire.buf.split_to(n);
                got.push((m[0], m[5..].to_vec()));
                if m[0] == tag {
                    return got;
                }
            }
            let n = self.wire.fill().await.unwrap();
            assert!(n > 0, "closed before {:?}: {got:?}", tag as char);
        }
    }

    /// The types of the server's messages up to and including the first one tagged `tag`.
    async fn types_until(&mut self, tag: u8) -> String {
        self.until(tag).await.iter().map(|(tag, _)| *tag as char).collect()
    }
}

#[test]
fn calls_pass_and_replies_are_reported() {
    let gate = Rc::new(Recorder::default());
    with_proxy(gate.clone(), |port| async move {
        let mut admin = direct().await;
        exec(&mut admin, "CREATE TABLE IF NOT EXISTS pg_proxy_t1 (id serial PRIMARY KEY, v text)").await;
        let mut c = proxied(port).await;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut c).await.unwrap();
        exec(&mut c, "BEGIN").await;
        let marker = uuid::Uuid::new_v4().to_string();
        let insert = "INSERT INTO pg_proxy_t1 (v) VALUES ($1) RETURNING id";
        let id: i32 = sqlx::query_scalar(insert).bind(&marker).fetch_one(&mut c).await.unwrap();
        exec(&mut c, "COMMIT").await;
        c.close().await.unwrap();

        assert_eq!(*gate.backends.borrow(), [pid]);
        assert_eq!(
            int(&mut admin, "SELECT id::int8 FROM pg_proxy_t1 WHERE v = $1", &marker).await,
            id as i64
        );
        let begin = gate.reply_to("BEGIN");
        assert_eq!((begin.tags, begin.status), (vec!["BEGIN".into()], Some(b'T')));
        // sqlx prepares (Parse/Describe/Sync), then executes (Bind/Execute/Close/Sync): the
        // second call carries the statement text remembered from the first.
        let executed = gate.reply_to(insert);
        assert_eq!(executed.tags, ["INSERT 0 1"]);
        assert_eq!((executed.rows, executed.status, executed.error), (1, Some(b'T'), None));
        let commit = gate.reply_to("COMMIT");
        assert_eq!((commit.tags, commit.status), (vec!["COMMIT".into()], Some(b'I')));
        let selected = gate.reply_to("SELECT pg_backend_pid()");
        assert_eq!((selected.tags, selected.rows), (vec!["SELECT 1".into()], 1));
    });
}

#[test]
fn failed_call_is_answered_and_never_executed() {
    let gate = Rc::new(Recorder { fail_on: Some("pg_proxy_t2"), ..Recorder::default() });
    with_proxy(gate.clone(), |port| async move {
        let mut admin = direct().await;
        exec(&mut admin, "CREATE TABLE IF NOT EXISTS pg_proxy_t2 (v text)").await;
        let mut c = proxied(port).await;
        let marker = uuid::Uuid::new_v4().to_string();
        let simple = format!("INSERT INTO pg_proxy_t2 (v) VALUES ('{marker}')");
        let err = sqlx::raw_sql(&simple).execute(&mut c).await.unwrap_err();
        let db = err.as_database_error().unwrap_or_else(|| panic!("not a database error: {err}"));
        assert_eq!((db.code().as_deref(), db.message()), (Some("XX000"), FAILURE));
        let prepared = sqlx::query("INSERT INTO pg_proxy_t2 (v) VALUES ($1)").bind(&marker);
        let err = prepared.execute(&mut c).await.unwrap_err();
        assert!(err.to_string().contains(FAILURE), "{err}");
        // The connection is still usable, and the server never saw the inserts.
        assert_eq!(int(&mut c, "SELECT length($1)::int8", "abc").await, 3);
        assert_eq!(int(&mut admin, "SELECT count(*) FROM pg_proxy_t2 WHERE v = $1", &marker).await, 0);
        let error = Some(("XX000".to_string(), FAILURE.to_string()));
        let expected = PgReply { error, status: Some(b'I'), ..PgReply::default() };
        assert_eq!(gate.reply_to(&simple), expected);
    });
}

/// An injected failure leaves the server where PostgreSQL would: a statement that fails
/// inside a transaction aborts it (only ROLLBACK is accepted next, not a SAVEPOINT), and a
/// COMMIT that fails ends the transaction, rolled back.
#[test]
fn a_failed_call_in_a_transaction_leaves_the_server_as_a_real_failure_would() {
    let gate = Rc::new(Recorder { fail_on: Some("pg_proxy_t9"), ..Recorder::default() });
    with_proxy(gate.clone(), |port| async move {
        let mut admin = direct().await;
        exec(&mut admin, "CREATE TABLE IF NOT EXISTS pg_proxy_t9 (v text)").await;
        let mut c = proxied(port).await;
        exec(&mut c, "BEGIN").await;
        let err = sqlx::raw_sql("INSERT INTO pg_proxy_t9 VALUES ('x')").execute(&mut c).await.unwrap_err();
        assert!(err.to_string().contains(FAILURE), "{err}");
        let aborted = sqlx::raw_sql("SAVEPOINT s1").execute(&mut c).await.unwrap_err();
        assert!(aborted.to_string().contains("current transaction is aborted"), "{aborted}");
        exec(&mut c, "ROLLBACK").await;
    });
    // A failed COMMIT ends the transaction: its row is gone, and the next statement runs in
    // autocommit (it would join the old transaction, never committed, were it still open).
    let gate = Rc::new(Recorder { fail_on: Some("COMMIT"), ..Recorder::default() });
    with_proxy(gate.clone(), |port| async move {
        let mut admin = direct().await;
        let mut c = proxied(port).await;
        let (before, after) = (uuid::Uuid::new_v4().to_string(), uuid::Uuid::new_v4().to_string());
        exec(&mut c, "BEGIN").await;
        exec(&mut c, &format!("INSERT INTO pg_proxy_t9 VALUES ('{before}')")).await;
        let err = sqlx::raw_sql("COMMIT").execute(&mut c).await.unwrap_err();
        assert!(err.to_string().contains(FAILURE), "{err}");
        exec(&mut c, &format!("INSERT INTO pg_proxy_t9 VALUES ('{after}')")).await;
        assert_eq!(int(&mut admin, "SELECT count(*) FROM pg_proxy_t9 WHERE v = $1", &before).await, 0);
        assert_eq!(int(&mut admin, "SELECT count(*) FROM pg_proxy_t9 WHERE v = $1", &after).await, 1);
    });
}

#[test]
fn required_tls_is_refused_naming_sslmode() {
    let gate = Rc::new(Recorder::default());
    with_proxy(gate.clone(), |port| async move {
        let out = psql(&proxy_url(port, "require"), "select 1").await;
        assert!(!out.status.success(), "psql with sslmode=require connected through the proxy");
        assert!(eventually(async || !gate.refused.borrow().is_empty()).await, "no refusal reported");
        assert!(gate.refused.borrow()[0].contains("sslmode=require"), "{:?}", gate.refused);
        // A direct TLS ClientHello (PG 17 sslnegotiation=direct) is refused and closed.
        let mut tls = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        tls.write_all(&[0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00]).await.unwrap();
        assert_eq!(tls.read(&mut [0u8; 16]).await.unwrap(), 0);
        let refused = gate.refused.borrow();
        assert!(refused.len() == 2 && refused[1].contains("TLS directly"), "{refused:?}");
        assert!(refused[1].contains("sslmode"), "{refused:?}");
        assert!(gate.backends.borrow().is_empty());
    });
}

#[test]
fn dead_worker_releases_its_backend_and_locks() {
    let gate = Rc::new(Recorder { stall_on: Some("pg_proxy_stall"), ..Recorder::default() });
    with_proxy(gate.clone(), |port| async move {
        let mut admin = direct().await;
        exec(&mut admin, "CREATE TABLE IF NOT EXISTS pg_proxy_t4 (id int PRIMARY KEY)").await;
        exec(&mut admin, "INSERT INTO pg_proxy_t4 VALUES (1), (2) ON CONFLICT DO NOTHING").await;
        // The worker dies idle in its transaction, then while a call is held at the gate.
        for (id, held) in [(1, false), (2, true)] {
            let mut c = proxied(port).await;
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut c).await.unwrap();
            exec(&mut c, "BEGIN").await;
            exec(&mut c, &format!("SELECT id FROM pg_proxy_t4 WHERE id = {id} FOR UPDATE")).await;
            if held {
                let stalled = sqlx::raw_sql("SELECT 'pg_proxy_stall'").execute(&mut c);
                assert!(tokio::time::timeout(Duration::from_millis(300), stalled).await.is_err());
            }
            // Its socket closes without Terminate (PgConnection has no Drop that sends one).
            drop(c);
            let alive = "SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int";
            let gone = eventually(async || int(&mut admin, alive, pid).await == 0).await;
            assert!(gone, "backend {pid} (held: {held}) still in pg_stat_activity after 2 s");
            let lock = format!("SELECT id FROM pg_proxy_t4 WHERE id = {id} FOR UPDATE NOWAIT");
            sqlx::raw_sql(&lock)
                .execute(&mut admin)
                .await
                .expect("the dead worker's row lock is released");
        }
    });
}

#[test]
fn psql_works_through_the_proxy() {
    let gate = Rc::new(Recorder::default());
    with_proxy(gate.clone(), |port| async move {
        // sslmode=prefer: libpq sends SSLRequest first, gets N, continues in clear text.
        let out = psql(&proxy_url(port, "prefer"), "select 1").await;
        assert!(out.status.success(), "psql failed: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
        let reply = gate.reply_to("select 1");
        assert_eq!((reply.tags, reply.rows, reply.status), (vec!["SELECT 1".into()], 1, Some(b'I')));
        assert_eq!(gate.backends.borrow().len(), 1);
        assert!(gate.refused.borrow().is_empty());
    });
}

#[test]
fn flush_calls_multi_statement_queries_and_cancel() {
    let gate = Rc::new(Recorder { fail_on: Some("pg_proxy_fail"), ..Recorder::default() });
    with_proxy(gate.clone(), |port| async move {
        let mut c = Raw::connect(port).await;
        // Parse + Describe + Flush ends at RowDescription, without ReadyForQuery.
        c.send(&[(b'P', b"\0SELECT 7 AS n\0\0\0"), (b'D', b"S\0"), (b'H', b"")]).await;
        assert_eq!(c.types_until(b'T').await, "1tT");
        // The next call binds the unnamed statement parsed by the previous one.
        c.send(BIND_EXECUTE_SYNC).await;
        assert_eq!(c.types_until(b'Z').await, "2DCZ");
        let replies = gate.replies.borrow().clone();
        let texts: Vec<_> = replies.iter().map(|(call, _)| call.sql.clone()).collect();
        assert_eq!(texts, [["SELECT 7 AS n"], ["SELECT 7 AS n"]]);
        assert_eq!((replies[0].1.status, replies[1].1.status), (None, Some(b'I')));
        assert_eq!(replies[1].1.tags, ["SELECT 1"]);
        // An ErrorResponse ends a Flush call; a Sync follows it.
        c.send(&[(b'P', b"\0SELEC 1\0\0\0"), (b'H', b"")]).await;
        assert_eq!(c.types_until(b'E').await, "E");
        c.send(&[(b'S', b"")]).await;
        assert_eq!(c.types_until(b'Z').await, "Z");
        assert_eq!(gate.reply_to("SELEC 1").error.unwrap().0, "42601");
        // A failed Flush call: the proxy skips to the Sync as the server would have done
        // (forwarded, this Bind would run the unnamed SELECT 7).
        c.send(&[(b'P', b"\0SELECT 'pg_proxy_fail'\0\0\0"), (b'H', b"")]).await;
        assert_eq!(c.types_until(b'E').await, "E");
        c.send(BIND_EXECUTE_SYNC).await;
        assert_eq!(c.types_until(b'Z').await, "Z");
        // Several statements in one Query: several CommandCompletes, one ReadyForQuery.
        c.send(&[(b'Q', b"SELECT 1; SELECT 2, 3; BEGIN\0")]).await;
        assert_eq!(c.types_until(b'Z').await, "TDCTDCCZ");
        let reply = gate.reply_to("SELECT 1; SELECT 2, 3; BEGIN");
        assert_eq!((reply.tags.len(), reply.rows, reply.status), (3, 2, Some(b'T')));
        // A CancelRequest on a new connection reaches the backend.
        c.send(&[(b'Q', b"SELECT pg_sleep(30)\0")]).await;
        let mut admin = direct().await;
        let running =
            "SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int AND query LIKE '%pg_sleep%'";
        assert!(eventually(async || int(&mut admin, running, c.pid).await == 1).await);
        let mut cancel = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let len = (12 + c.key.len() as i32).to_be_bytes();
        let packet = [&len[..], &CANCEL_REQUEST.to_be_bytes(), &c.pid.to_be_bytes(), &c.key].concat();
        cancel.write_all(&packet).await.unwrap();
        assert_eq!(cancel.read(&mut [0u8; 1]).await.unwrap(), 0);
        let got = c.until(b'Z').await;
        let error = got.iter().find(|(tag, _)| *tag == b'E').map(|(_, body)| error_fields(body).0);
        assert_eq!(error.as_deref(), Some("57014"), "{got:?}");
    });
}

/// `pg:commit-response-lost` through the proxy: the COMMIT is applied, the worker's connection
/// drops instead of the reply, and the gate hears the connection error.
#[test]
fn a_lost_commit_reply_commits_and_drops_the_workers_connection() {
    let gate = Rc::new(Recorder { lose_on: Some("COMMIT"), ..Recorder::default() });
    with_proxy(gate.clone(), |port| async move {
        let mut admin = direct().await;
        exec(&mut admin, "CREATE TABLE IF NOT EXISTS pg_proxy_lost (v text)").await;
        let marker = uuid::Uuid::new_v4().to_string();
        let mut c = proxied(port).await;
        exec(&mut c, "BEGIN").await;
        sqlx::query("INSERT INTO pg_proxy_lost (v) VALUES ($1)").bind(&marker).execute(&mut c).await.unwrap();
        let e = sqlx::raw_sql("COMMIT").execute(&mut c).await.expect_err("the COMMIT's reply came through");
        assert!(matches!(e, sqlx::Error::Io(_) | sqlx::Error::Protocol(_)), "not a connection error: {e:?}");
        assert_eq!(int(&mut admin, "SELECT count(*) FROM pg_proxy_lost WHERE v = $1", &marker).await, 1, "the COMMIT was not applied");
        let dropped = gate.dropped.borrow().clone();
        assert_eq!(dropped.len(), 1, "{dropped:?}");
        assert_eq!((dropped[0].0.sql.as_slice(), dropped[0].1.as_str()), (&["COMMIT".to_string()][..], crate::nemesis::pg::COMMIT_REPLY_LOST));
        assert_eq!(dropped[0].0.status, Some(b'T'), "the proxy tells the gate the transaction was open");
    });
}

/// `pg:connection-reset` through the proxy: the statement is not applied, the open transaction
/// is rolled back (its row gone, its locks released) and the worker's connection drops.
#[test]
fn a_reset_connection_rolls_back_without_forwarding_and_drops_the_worker() {
    let gate = Rc::new(Recorder { reset_on: Some("reset here"), ..Recorder::default() });
    with_proxy(gate.clone(), |port| async move {
        let mut admin = direct().await;
        exec(&mut admin, "CREATE TABLE IF NOT EXISTS pg_proxy_reset (v text PRIMARY KEY)").await;
        let marker = uuid::Uuid::new_v4().to_string();
        let mut c = proxied(port).await;
        exec(&mut c, "BEGIN").await;
        sqlx::query("INSERT INTO pg_proxy_reset (v) VALUES ($1)").bind(&marker).execute(&mut c).await.unwrap();
        let e = sqlx::raw_sql("SELECT 'reset here'").execute(&mut c).await.expect_err("the reset statement answered");
        assert!(matches!(e, sqlx::Error::Io(_) | sqlx::Error::Protocol(_)), "not a connection error: {e:?}");
        // Rolled back before the worker heard of it: the key is free at once, nothing waits.
        let inserted = sqlx::query("INSERT INTO pg_proxy_reset (v) VALUES ($1)").bind(&marker).execute(&mut admin).await;
        assert!(inserted.is_ok(), "the reset transaction's row or lock survived: {inserted:?}");
        assert!(gate.replies.borrow().iter().all(|(call, _)| !call.sql.iter().any(|s| s.contains("reset here"))), "the statement was forwarded");
        assert_eq!(gate.dropped.borrow().last().map(|(_, m)| m.clone()).as_deref(), Some(crate::nemesis::pg::CONNECTION_RESET));
    });
}
