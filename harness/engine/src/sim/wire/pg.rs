//! The PostgreSQL gating proxy: relays one external worker's connections to the real server
//! and holds each call (the client's messages up to the first Sync, Query, Flush, FunctionCall
//! or Terminate) until its [`PgGate`] admits it.
//!
//! The semantics follow the PostgreSQL documentation, "Frontend/Backend Protocol", sections
//! "Message Flow" and "Message Formats". Framing is hand-written: after startup every message is
//! a type byte and an Int32 length (counting itself) followed by the body; messages the proxy
//! does not interpret pass through untouched. Encryption is declined (`N`), so authentication
//! (SCRAM included) is relayed in clear text, 1:1, and the proxy never needs the password.

use std::collections::{HashMap, HashSet};
use std::io;
use std::rc::Rc;

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::debug;

use crate::sim::wire::gate::{Admit, PgCall, PgGate, PgReply};

const SSL_REQUEST: i32 = 80877103;
const GSSENC_REQUEST: i32 = 80877104;
const CANCEL_REQUEST: i32 = 80877102;
/// The first byte of a TLS record (a ClientHello sent directly, PG 17 `sslnegotiation=direct`).
const TLS_HANDSHAKE: u8 = 0x16;
/// PostgreSQL's limit on a startup packet (`MAX_STARTUP_PACKET_LENGTH`).
const MAX_STARTUP: usize = 10_000;
/// SQLSTATE of an injected failure: `internal_error`, which drivers do not retry.
const FAIL_SQLSTATE: &str = "XX000";
/// Client messages that end a call: Sync, Query, Flush, FunctionCall, Terminate.
const CALL_ENDS: &[u8] = b"SQHFX";

/// Accepts worker connections on `listener` and relays each one to `upstream` ("host:port" of
/// the real PostgreSQL), gating every call through `gate`. Runs until the future is dropped;
/// each connection is a `tokio::task::spawn_local` task (the caller runs it inside a tokio
/// LocalSet, a turmoil host). Dropping the runtime closes every socket.
///
/// Per connection: SSLRequest and GSSENCRequest are answered `N`; a direct TLS hello, or a
/// client that closes after that `N`, is reported with [`PgGate::refused`]; a CancelRequest is
/// relayed ungated to a fresh upstream connection. Errors of one connection only close it.
pub async fn serve(listener: TcpListener, upstream: String, gate: Rc<dyn PgGate>) {
    loop {
        match listener.accept().await {
            Ok((sock, peer)) => {
                let (upstream, gate) = (upstream.clone(), gate.clone());
                tokio::task::spawn_local(async move {
                    debug!(%peer, "pg proxy: connection");
                    if let Err(e) = session(sock, &upstream, gate).await {
                        debug!(%peer, error = %e, "pg proxy: connection ended");
                    }
                });
            }
            Err(e) => {
                debug!(error = %e, "pg proxy: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}

/// One connection: encryption negotiation, then either a relayed cancel or a gated session.
async fn session(client: TcpStream, upstream: &str, gate: Rc<dyn PgGate>) -> io::Result<()> {
    let mut client = Wire::new(client);
    let Some(startup) = negotiate(&mut client, &*gate).await? else {
        return Ok(());
    };
    if code(&startup) == CANCEL_REQUEST {
        return relay_cancel(&startup, upstream).await;
    }
    let server = Wire::new(TcpStream::connect(upstream).await?);
    client.sock.set_nodelay(true)?;
    server.sock.set_nodelay(true)?;
    let mut conn =
        Conn { client, server, gate, track: Track::default(), prepared: HashMap::new(), skip_to_sync: false, withhold: false };
    conn.server.sock.write_all(&startup).await?;
    if !conn.authenticate().await? {
        return Ok(());
    }
    debug!(pid = conn.track.pid, "pg proxy: backend ready");
    conn.gate.backend(conn.track.pid);
    conn.run().await
}

/// Reads the client's untyped startup packets, answering `N` to each SSLRequest and
/// GSSENCRequest, and returns the first other one (StartupMessage or CancelRequest).
/// `None`: the client closed, or opened TLS directly (reported to the gate).
async fn negotiate(client: &mut Wire, gate: &dyn PgGate) -> io::Result<Option<BytesMut>> {
    let mut declined: Option<&str> = None;
    loop {
        if client.buf.first() == Some(&TLS_HANDSHAKE) {
            gate.refused(
                "the worker opened TLS directly (sslnegotiation=direct); crashpoint's PostgreSQL \
                 proxy speaks clear text only: use sslmode=disable or sslmode=prefer"
                    .into(),
            );
            return Ok(None);
        }
        if let Some(n) = startup_len(&client.buf)? {
            let packet = client.buf.split_to(n);
            match code(&packet) {
                SSL_REQUEST => declined = Some("TLS (sslmode=require?)"),
                GSSENC_REQUEST => declined = Some("GSSAPI encryption (gssencmode=require?)"),
                _ => return Ok(Some(packet)),
            }
            client.sock.write_all(b"N").await?;
            continue;
        }
        if client.fill().await? == 0 {
            if let Some(what) = declined {
                gate.refused(format!(
                    "the worker closed its PostgreSQL connection when the proxy declined encryption: \
                     the worker requires {what}; use sslmode=disable or sslmode=prefer"
                ));
            }
            return Ok(None);
        }
    }
}

/// Sends a CancelRequest (16 bytes, longer since protocol 3.2) to a fresh upstream connection
/// and waits until the server closes it, as the server never answers one.
async fn relay_cancel(packet: &[u8], upstream: &str) -> io::Result<()> {
    let mut server = TcpStream::connect(upstream).await?;
    server.write_all(packet).await?;
    let _ = server.read(&mut [0u8; 1]).await;
    Ok(())
}

/// One socket and the bytes read from it but not consumed yet.
struct Wire {
    sock: TcpStream,
    buf: BytesMut,
}

impl Wire {
    fn new(sock: TcpStream) -> Wire {
        Wire { sock, buf: BytesMut::with_capacity(8192) }
    }

    /// Reads more bytes into the buffer; 0 at end of stream. Cancel-safe (for `select!`).
    async fn fill(&mut self) -> io::Result<usize> {
        self.sock.read_buf(&mut self.buf).await
    }
}

/// What the server has said so far on one connection, and about the call in flight.
#[derive(Default)]
struct Track {
    /// Backend pid from BackendKeyData (0 until it arrives).
    pid: i32,
    /// AuthenticationOk seen: the client sends nothing more until ReadyForQuery.
    authenticated: bool,
    /// Transaction status of the last ReadyForQuery (`None` until startup ends).
    status: Option<u8>,
    flight: Option<Flight>,
}

/// The answer of the call in flight, as it accumulates.
struct Flight {
    /// The batch ended with Flush: no ReadyForQuery, `expected` replies instead.
    counting: bool,
    expected: usize,
    seen: usize,
    /// The batch used the extended protocol (a Sync after CopyDone belongs to it).
    extended: bool,
    /// The server is in copy-in mode: the client's CopyData goes through at once.
    copy_in: bool,
    done: bool,
    reply: PgReply,
}

impl Flight {
    /// The expectations of `batch` (a complete call).
    fn new(batch: &[u8]) -> Flight {
        let last = messages(batch).last().map_or(b'S', |(tag, _)| tag);
        // Parse, Bind, Describe, Execute and Close each get one reply.
        let expected = messages(batch).filter(|(tag, _)| b"PBDEC".contains(tag)).count();
        let counting = last == b'H';
        Flight {
            counting,
            expected,
            seen: 0,
            extended: last != b'Q',
            copy_in: false,
            done: counting && expected == 0,
            reply: PgReply::default(),
        }
    }
}

impl Track {
    /// Takes in one server message. Asynchronous messages (NoticeResponse, NotificationResponse,
    /// ParameterStatus) change nothing; the call in flight is done at its ReadyForQuery, or
    /// after a Flush at its last expected reply or its first ErrorResponse.
    fn observe(&mut self, tag: u8, body: &[u8]) {
        match tag {
            b'K' if body.len() >= 4 => self.pid = i32::from_be_bytes(body[..4].try_into().unwrap()),
            b'R' if body.get(..4) == Some(&[0; 4]) => self.authenticated = true,
            b'Z' => self.status = body.first().copied(),
            _ => {}
        }
        let Some(f) = self.flight.as_mut().filter(|f| !f.done) else {
            return;
        };
        match tag {
            b'C' => f.reply.tags.push(cstr(body).0),
            b'D' => f.reply.rows += 1,
            b'E' if f.reply.error.is_none() => f.reply.error = Some(error_fields(body)),
            b'Z' => f.reply.status = self.status,
            b'G' | b'W' => f.copy_in = true,
            _ => {}
        }
        if f.counting {
            // ParseComplete, BindComplete, CloseComplete, RowDescription/NoData (Describe),
            // CommandComplete/EmptyQueryResponse/PortalSuspended (Execute).
            f.seen += usize::from(b"123TnCIs".contains(&tag));
            f.done = tag == b'E' || f.seen >= f.expected;
        } else {
            f.done = tag == b'Z';
        }
    }

    /// The reply of the call in flight once it is complete.
    fn finished(&mut self) -> Option<PgReply> {
        self.flight.take_if(|f| f.done).map(|f| f.reply)
    }
}

/// A started session: the worker's socket, its backend's socket, and per-connection state.
struct Conn {
    client: Wire,
    server: Wire,
    gate: Rc<dyn PgGate>,
    track: Track,
    /// Prepared statement name → SQL text (`""` is the unnamed statement).
    prepared: HashMap<String, String>,
    /// A failed Flush-terminated call: the client expects the server to skip to the next Sync.
    skip_to_sync: bool,
    /// The reply of the call in flight is read but not relayed: the worker dies before it
    /// reaches it (`crash@commit:applied`).
    withhold: bool,
}

impl Conn {
    /// Relays authentication (any method) until the server's first ReadyForQuery. `false`:
    /// either side closed (a failed authentication ends here, its ErrorResponse relayed).
    async fn authenticate(&mut self) -> io::Result<bool> {
        while self.track.status.is_none() {
            tokio::select! {
                n = self.server.fill() => {
                    if n? == 0 { return Ok(false) }
                    self.relay_server().await?;
                }
                n = self.client.fill(), if !self.track.authenticated => {
                    if n? == 0 { return Ok(false) }
                    let out = self.client.buf.split();
                    self.server.sock.write_all(&out).await?;
                }
            }
        }
        Ok(true)
    }

    /// Gates, forwards or fails, and reports the client's calls until either side closes.
    async fn run(&mut self) -> io::Result<()> {
        while let Some(batch) = self.next_batch().await? {
            let call = self.describe(&batch);
            if call.terminate {
                self.server.sock.write_all(&batch).await?;
                return Ok(());
            }
            if !self.gate.gated(&call) {
                if self.forward(&batch).await?.is_none() {
                    return Ok(());
                }
                continue;
            }
            debug!(pid = self.track.pid, sql = ?call.sql, "pg proxy: holding");
            let reply = match self.hold(&call).await? {
                None => return Ok(()),
                Some(Admit::Forward) => match self.forward(&batch).await? {
                    Some(reply) => reply,
                    None => return Ok(()),
                },
                Some(Admit::Fail(text)) => self.answer_failure(&batch, &text).await?,
                Some(Admit::Withhold) => {
                    self.withhold = true;
                    let Some(reply) = self.forward(&batch).await? else { return Ok(()) };
                    self.gate.replied(self.track.pid, &call, reply);
                    // Applied, and the worker never hears of it: it is killed next.
                    std::future::pending::<()>().await;
                    return Ok(());
                }
            };
            self.gate.replied(self.track.pid, &call, reply);
        }
        Ok(())
    }

    /// Waits for the client's next complete call, relaying server messages meanwhile.
    /// `None`: either side closed (a partial call is never forwarded).
    async fn next_batch(&mut self) -> io::Result<Option<BytesMut>> {
        let mut scanned = 0;
        loop {
            while let Some(n) = frame_len(&self.client.buf[scanned..])? {
                let tag = self.client.buf[scanned];
                if self.skip_to_sync && !matches!(tag, b'S' | b'X') {
                    self.client.buf.advance(n); // scanned is 0 while skipping
                    continue;
                }
                self.skip_to_sync = false;
                scanned += n;
                if CALL_ENDS.contains(&tag) {
                    return Ok(Some(self.client.buf.split_to(scanned)));
                }
            }
            tokio::select! {
                n = self.client.fill() => if n? == 0 { return Ok(None) },
                n = self.server.fill() => {
                    if n? == 0 { return Ok(None) }
                    self.relay_server().await?;
                }
            }
        }
    }

    /// The [`PgCall`] of `batch`: Query and Parse texts in order, plus the remembered text of
    /// each statement bound but parsed in an earlier call (once per statement). Updates the
    /// prepared-statement map (Parse adds, Close of a statement removes).
    fn describe(&mut self, batch: &[u8]) -> PgCall {
        let mut call = PgCall::default();
        let mut named = HashSet::new();
        for (tag, body) in messages(batch) {
            match tag {
                b'Q' => {
                    call.sql.push(cstr(body).0);
                    call.executes = true;
                }
                b'E' | b'F' => call.executes = true,
                b'P' => {
                    let (name, rest) = cstr(body);
                    let text = cstr(rest).0;
                    call.sql.push(text.clone());
                    named.insert(name.clone());
                    self.prepared.insert(name, text);
                }
                b'B' => {
                    let statement = cstr(cstr(body).1).0;
                    match self.prepared.get(&statement) {
                        Some(text) if named.insert(statement) => call.sql.push(text.clone()),
                        _ => {}
                    }
                }
                b'C' if body.first() == Some(&b'S') => {
                    self.prepared.remove(&cstr(&body[1..]).0);
                }
                b'X' => call.terminate = true,
                _ => {}
            }
        }
        call
    }

    /// Holds `call` at the gate, relaying server messages meanwhile. `None`: either side
    /// closed first (the worker died while held; the upstream socket is then dropped).
    async fn hold(&mut self, call: &PgCall) -> io::Result<Option<Admit>> {
        let gate = self.gate.clone();
        let held = gate.hold(self.track.pid, call);
        tokio::pin!(held);
        loop {
            tokio::select! {
                admit = &mut held => return Ok(Some(admit)),
                n = self.client.fill() => if n? == 0 { return Ok(None) },
                n = self.server.fill() => {
                    if n? == 0 { return Ok(None) }
                    self.relay_server().await?;
                }
            }
        }
    }

    /// Writes `batch` upstream and relays the server's messages until the call's answer is
    /// complete; its last byte has reached the client when this returns. `None`: either side
    /// closed first.
    async fn forward(&mut self, batch: &[u8]) -> io::Result<Option<PgReply>> {
        self.track.flight = Some(Flight::new(batch));
        self.server.sock.write_all(batch).await?;
        loop {
            if let Some(reply) = self.track.finished() {
                return Ok(Some(reply));
            }
            tokio::select! {
                n = self.server.fill() => {
                    if n? == 0 { return Ok(None) }
                    self.relay_server().await?;
                }
                n = self.client.fill() => if n? == 0 { return Ok(None) },
            }
            self.pass_copy_data().await?;
        }
    }

    /// In copy-in mode, forwards the client's CopyData, CopyDone and CopyFail at once (and for
    /// an extended-protocol call the Sync or Flush that follows them); other messages wait.
    async fn pass_copy_data(&mut self) -> io::Result<()> {
        let Some(f) = self.track.flight.as_ref().filter(|f| f.copy_in) else {
            return Ok(());
        };
        let mut end = 0;
        while let Some(n) = frame_len(&self.client.buf[end..])? {
            let tag = self.client.buf[end];
            if !(b"dcf".contains(&tag) || f.extended && b"SH".contains(&tag)) {
                break;
            }
            end += n;
        }
        if end > 0 {
            let out = self.client.buf.split_to(end);
            self.server.sock.write_all(&out).await?;
        }
        Ok(())
    }

    /// Answers a call the gate failed, without forwarding it: ErrorResponse (ERROR, XX000,
    /// `text`) and, unless the batch ended with Flush, ReadyForQuery with the status a real
    /// error would leave: `E` inside a transaction, else the last known status. The server's
    /// transaction was not touched; the client then rolls back (psycopg sends ROLLBACK only
    /// when the status is not `I`), as an in-process worker does after an injected failure.
    async fn answer_failure(&mut self, batch: &[u8], text: &str) -> io::Result<PgReply> {
        let flush = messages(batch).last().is_some_and(|(tag, _)| tag == b'H');
        let status = match self.track.status.unwrap_or(b'I') {
            b'T' => b'E',
            s => s,
        };
        let mut out = error_response(FAIL_SQLSTATE, text);
        if flush {
            self.skip_to_sync = true;
        } else {
            out.extend_from_slice(&frame(b'Z', &[status]));
        }
        self.client.sock.write_all(&out).await?;
        let error = Some((FAIL_SQLSTATE.to_string(), text.to_string()));
        Ok(PgReply { error, status: (!flush).then_some(status), ..PgReply::default() })
    }

    /// Relays the server's complete buffered messages to the client in one write, observing each.
    async fn relay_server(&mut self) -> io::Result<()> {
        let mut end = 0;
        while let Some(n) = frame_len(&self.server.buf[end..])? {
            let m = &self.server.buf[end..end + n];
            self.track.observe(m[0], &m[5..]);
            end += n;
        }
        if end > 0 {
            let out = self.server.buf.split_to(end);
            if !self.withhold {
                self.client.sock.write_all(&out).await?;
            }
        }
        Ok(())
    }
}

/// Total length of the typed message at the start of `buf` if it is complete.
fn frame_len(buf: &[u8]) -> io::Result<Option<usize>> {
    let Some(len) = buf.get(1..5) else {
        return Ok(None);
    };
    let len = i32::from_be_bytes(len.try_into().unwrap());
    if len < 4 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("message {:?} has length {len}", buf[0] as char),
        ));
    }
    let total = 1 + len as usize;
    Ok((buf.len() >= total).then_some(total))
}

/// Length of the untyped startup packet at the start of `buf` if it is complete.
fn startup_len(buf: &[u8]) -> io::Result<Option<usize>> {
    let Some(len) = buf.get(..4) else {
        return Ok(None);
    };
    let len = i32::from_be_bytes(len.try_into().unwrap()) as usize;
    if !(8..=MAX_STARTUP).contains(&len) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("startup packet of {len} bytes")));
    }
    Ok((buf.len() >= len).then_some(len))
}

/// The request code of a startup packet (protocol version, or SSL/GSS/cancel request code).
fn code(packet: &[u8]) -> i32 {
    i32::from_be_bytes(packet[4..8].try_into().unwrap())
}

/// The complete typed messages of `buf`, as (type byte, body).
fn messages(buf: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        let n = frame_len(rest).ok().flatten()?;
        let (m, tail) = rest.split_at(n);
        rest = tail;
        Some((m[0], &m[5..]))
    })
}

/// The NUL-terminated string at the start of `b` (lossy UTF-8) and the bytes after it.
fn cstr(b: &[u8]) -> (String, &[u8]) {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    (String::from_utf8_lossy(&b[..end]).into_owned(), b.get(end + 1..).unwrap_or(&[]))
}

/// SQLSTATE (field `C`) and message (field `M`) of an ErrorResponse body.
fn error_fields(mut body: &[u8]) -> (String, String) {
    let (mut code, mut message) = (String::new(), String::new());
    while let Some((&field, rest)) = body.split_first().filter(|(&f, _)| f != 0) {
        let (value, tail) = cstr(rest);
        match field {
            b'C' => code = value,
            b'M' => message = value,
            _ => {}
        }
        body = tail;
    }
    (code, message)
}

/// One typed message: `tag`, Int32 length, `body`.
fn frame(tag: u8, body: &[u8]) -> BytesMut {
    let mut out = BytesMut::with_capacity(5 + body.len());
    out.put_u8(tag);
    out.put_i32(4 + body.len() as i32);
    out.put_slice(body);
    out
}

/// An ErrorResponse of severity ERROR with SQLSTATE `code` and message `text`.
fn error_response(code: &str, text: &str) -> BytesMut {
    let mut body = BytesMut::new();
    for (field, value) in [(b'S', "ERROR"), (b'V', "ERROR"), (b'C', code), (b'M', &text.replace('\0', " "))] {
        body.put_u8(field);
        body.put_slice(value.as_bytes());
        body.put_u8(0);
    }
    body.put_u8(0);
    frame(b'E', &body)
}

#[cfg(test)]
mod tests {
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
    /// mentioning `fail_on` and holds forever those mentioning `stall_on`.
    #[derive(Default)]
    struct Recorder {
        fail_on: Option<&'static str>,
        stall_on: Option<&'static str>,
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
            match mentions(call, self.fail_on) {
                true => Admit::Fail(FAILURE.into()),
                false => Admit::Forward,
            }
        }
        fn replied(&self, _pid: i32, call: &PgCall, reply: PgReply) {
            self.replies.borrow_mut().push((call.clone(), reply))
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
}
