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

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::debug;

use crate::sim::wire::admit::{Admit, PgCall, PgGate, PgReply};

pub mod calls;
mod frame;
#[cfg(test)]
mod tests;

use frame::*;

const SSL_REQUEST: i32 = 80877103;
const GSSENC_REQUEST: i32 = 80877104;
const CANCEL_REQUEST: i32 = 80877102;
/// The first byte of a TLS record (a ClientHello sent directly, PG 17 `sslnegotiation=direct`).
const TLS_HANDSHAKE: u8 = 0x16;
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
    // Connections in the order the worker opened them (the kernel queues them in connect order).
    let mut opened = 0u64;
    loop {
        match listener.accept().await {
            Ok((sock, peer)) => {
                let (upstream, gate) = (upstream.clone(), gate.clone());
                opened += 1;
                let conn = opened;
                let watched = gate.watch(&sock);
                tokio::task::spawn_local(async move {
                    let _watched = watched;
                    debug!(%peer, "pg proxy: connection");
                    if let Err(e) = session(sock, &upstream, gate, conn).await {
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
async fn session(
    client: TcpStream,
    upstream: &str,
    gate: Rc<dyn PgGate>,
    opened: u64,
) -> io::Result<()> {
    struct Ends(Rc<dyn PgGate>, std::cell::Cell<bool>);
    impl Ends {
        fn started(&self) {
            if self.1.replace(false) {
                self.0.pending(false);
            }
        }
    }
    impl Drop for Ends {
        fn drop(&mut self) {
            self.started();
            self.0.ended();
        }
    }
    gate.pending(true);
    let ends = Ends(gate.clone(), std::cell::Cell::new(true));
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
    let mut conn = Conn {
        client,
        server,
        gate,
        track: Track::default(),
        prepared: HashMap::new(),
        skip_to_sync: false,
        withhold: false,
        txn_first: None,
        txn_about: None,
        opened,
    };
    if let Some(name) = startup_param(&startup, "application_name").filter(|n| !n.is_empty()) {
        conn.gate.client(name);
    }
    conn.server.sock.write_all(&startup).await?;
    if !conn.authenticate().await? {
        return Ok(());
    }
    debug!(pid = conn.track.pid, "pg proxy: backend ready");
    conn.gate.backend(conn.track.pid);
    ends.started();
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

/// The value of `key` in a StartupMessage (protocol version, then name/value C strings).
fn startup_param(packet: &[u8], key: &str) -> Option<String> {
    let mut rest = packet.get(8..)?;
    while !rest.is_empty() && rest[0] != 0 {
        let (k, r) = cstr(rest);
        let (v, r) = cstr(r);
        if k == key {
            return Some(v);
        }
        rest = r;
    }
    None
}

/// The parameter values of a Bind message body, as text (hex for a value that is not UTF-8,
/// `NULL` for a null).
fn bind_params(body: &[u8]) -> Vec<String> {
    let rest = cstr(cstr(body).1).1;
    let i16_at = |b: &[u8], i: usize| {
        b.get(i..i + 2)
            .map(|x| i16::from_be_bytes([x[0], x[1]]) as usize)
    };
    let Some(nformats) = i16_at(rest, 0) else {
        return vec![];
    };
    let mut i = 2 + 2 * nformats;
    let Some(n) = i16_at(rest, i) else {
        return vec![];
    };
    i += 2;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let Some(len) = rest
            .get(i..i + 4)
            .map(|x| i32::from_be_bytes([x[0], x[1], x[2], x[3]]))
        else {
            break;
        };
        i += 4;
        if len < 0 {
            out.push("NULL".into());
            continue;
        }
        let Some(v) = rest.get(i..i + len as usize) else {
            break;
        };
        i += len as usize;
        out.push(match std::str::from_utf8(v) {
            Ok(t) => t.to_string(),
            Err(_) => v.iter().map(|b| format!("{b:02x}")).collect(),
        });
    }
    out
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
        Wire {
            sock,
            buf: BytesMut::with_capacity(8192),
        }
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
        let expected = messages(batch)
            .filter(|(tag, _)| b"PBDEC".contains(tag))
            .count();
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
    /// The key of the first held call of the open transaction ([`PgCall::key`]).
    txn_first: Option<String>,
    /// The first bound parameter of that call ([`PgCall::about`]).
    txn_about: Option<String>,
    /// The connection's number in the order the worker opened them ([`PgCall::opened`]).
    opened: u64,
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
            let mut call = self.describe(&batch);
            call.status = self.track.status;
            call.opened = self.opened;
            if call.terminate {
                self.server.sock.write_all(&batch).await?;
                return Ok(());
            }
            // A call made outside a transaction (an ungated BEGIN included) starts afresh.
            if !matches!(call.status, Some(b'T' | b'E')) {
                self.txn_first = None;
                self.txn_about = None;
            }
            if !self.gate.gated(&call) {
                debug!(pid = self.track.pid, sql = ?call.sql, "pg proxy: passes ungated");
                self.gate.pending(true);
                let forwarded = self.forward(&batch).await;
                self.gate.pending(false);
                if forwarded?.is_none() {
                    return Ok(());
                }
                continue;
            }
            // The transaction's first held statement names its later ones.
            let own = format!("{} {}", call.sql.join("; "), call.params.join(", "));
            call.key = match &self.txn_first {
                Some(first) => format!("{first} | {own}"),
                None => own.clone(),
            };
            if matches!(call.status, Some(b'T')) && self.txn_first.is_none() {
                self.txn_first = Some(own);
                self.txn_about = call.params.first().cloned();
            }
            call.about = match &self.txn_first {
                Some(_) => self.txn_about.clone(),
                None => call.params.first().cloned(),
            };
            debug!(pid = self.track.pid, sql = ?call.sql, "pg proxy: holding");
            let reply = match self.hold(&call).await? {
                None => return Ok(()),
                Some(Admit::Forward) => match self.forward(&batch).await? {
                    Some(reply) => reply,
                    None => return Ok(()),
                },
                Some(Admit::Fail(text)) => {
                    self.fail_upstream(calls::keyword_label(&call) == "commit")
                        .await?;
                    self.answer_failure(&batch, &text).await?
                }
                Some(Admit::LoseReply) => {
                    // Applied; the worker's connection closes (this session ends) before it
                    // hears of it. A COMMIT that failed after all is recorded with its own
                    // error (the worker, which gets a dropped connection, sees an error either way).
                    self.withhold = true;
                    match self.forward(&batch).await? {
                        Some(reply) if reply.error.is_some() => {
                            self.gate.replied(self.track.pid, &call, reply)
                        }
                        Some(_) => self.gate.dropped(
                            self.track.pid,
                            &call,
                            crate::nemesis::pg::COMMIT_REPLY_LOST,
                        ),
                        None => {}
                    }
                    return Ok(());
                }
                Some(Admit::Reset) => {
                    self.rollback_upstream().await?;
                    self.gate
                        .dropped(self.track.pid, &call, crate::nemesis::pg::CONNECTION_RESET);
                    return Ok(());
                }
                Some(Admit::Withhold) => {
                    self.withhold = true;
                    let Some(reply) = self.forward(&batch).await? else {
                        return Ok(());
                    };
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
                n = self.client.fill() => { self.gate.touch(); if n? == 0 { return Ok(None) } },
                n = self.server.fill() => {
                    self.gate.touch();
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
                    call.params.extend(bind_params(body));
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
                n = self.client.fill() => { self.gate.touch(); if n? == 0 { return Ok(None) } },
                n = self.server.fill() => {
                    self.gate.touch();
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
                    self.gate.touch();
                    if n? == 0 { return Ok(None) }
                    self.relay_server().await?;
                }
                n = self.client.fill() => { self.gate.touch(); if n? == 0 { return Ok(None) } },
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
        Ok(PgReply {
            error,
            status: (!flush).then_some(status),
            ..PgReply::default()
        })
    }

    /// Puts the server's session where PostgreSQL leaves it after the error the proxy answers
    /// instead of a call (`fail@`), without telling the worker: inside a transaction, a failed
    /// statement aborts it (the server runs a statement that fails, so that it too accepts
    /// only ROLLBACK now), and a failed COMMIT ends it rolled back (PostgreSQL documentation,
    /// "COMMIT": a transaction that cannot commit is rolled back). Without it the worker would
    /// be told its transaction failed while the server kept it open, a state no real
    /// PostgreSQL reaches.
    async fn fail_upstream(&mut self, commits: bool) -> io::Result<()> {
        if self.track.status != Some(b'T') {
            return Ok(());
        }
        let sql: &[u8] = if commits {
            b"ROLLBACK\0"
        } else {
            b"SELECT 1/0 AS crashpoint_injected_failure\0"
        };
        self.withhold = true;
        let forwarded = self.forward(&frame(b'Q', sql)).await;
        self.withhold = false;
        forwarded.map(|_| ())
    }

    /// Rolls back the connection's open transaction, if any, without telling the worker: what
    /// the server does when a connection drops, done before the worker can reconnect and run
    /// into the transaction's locks.
    async fn rollback_upstream(&mut self) -> io::Result<()> {
        if matches!(self.track.status, Some(b'T' | b'E')) {
            self.withhold = true;
            self.forward(&frame(b'Q', b"ROLLBACK\0")).await?;
        }
        Ok(())
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
