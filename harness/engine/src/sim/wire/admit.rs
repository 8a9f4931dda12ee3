//! The seam between a wire-level proxy and the scheduler: what a proxy reports of one call of
//! an external worker, and what it is told to do with it.
//!
//! A proxy (PostgreSQL, SQS or Redis) reads one complete call from the worker, asks its
//! gate ([`PgGate`], or [`super::worker::WireWorker`] for SQS and Redis) whether the call is gated, holds it until the gate admits it, then forwards it
//! (or answers with a service error), relays the reply, and reports what the reply said. The
//! gate turns that into the same [`crate::record::history::Step`]s as an in-process worker's call.

use async_trait::async_trait;

/// What the gate decided for a held call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admit {
    /// Forward the call to the service and relay its reply.
    Forward,
    /// Do not forward it: answer the worker with a service error carrying this text (an
    /// injected failure, `fail@point`). The proxy chooses an error its clients do not retry.
    Fail(String),
    /// Forward the call and read its whole reply, but never relay it: the call is applied and
    /// the worker is killed before it hears of it (`crash@commit:applied`).
    Withhold,
    /// Forward the call, read its whole reply, and close the worker's connection instead of
    /// relaying it: the statement is applied and the worker sees its connection drop
    /// (`pg:commit-response-lost`).
    LoseReply,
    /// Do not forward the call: roll back the connection's open transaction, as the server does
    /// when a connection drops, and close the worker's connection (`pg:connection-reset`).
    Reset,
}

/// One PostgreSQL call as the proxy saw it: the client's messages up to the first Sync,
/// Query, Flush, FunctionCall or Terminate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PgCall {
    /// The SQL texts in the batch, in order: each simple Query's text, each Parse's statement
    /// text, and for a Bind of a statement parsed in an earlier call, the text remembered for
    /// it (once per batch).
    pub sql: Vec<String>,
    /// Whether the batch ends with Terminate (the client is closing the connection).
    pub terminate: bool,
    /// Whether the batch executes anything (a Query, an Execute or a FunctionCall). A batch
    /// that only prepares (Parse, Describe, Sync: libpq's `PQprepare`, asyncpg, JDBC) is not a
    /// call of its own: it passes ungated, and its text is remembered for the Execute.
    pub executes: bool,
    /// The connection's transaction status before the call, from the last ReadyForQuery: `I`
    /// idle, `T` in a transaction, `E` in a failed one (`None` before the first).
    pub status: Option<u8>,
    /// What tells this call apart from a concurrent worker's other held calls whatever their
    /// arrival order: the first held statement of the connection's transaction with its bound
    /// parameters, then this call's (set by the proxy).
    pub key: String,
    /// The bound parameters of its Bind messages, as text (hex when not UTF-8, `NULL`).
    pub params: Vec<String>,
    /// The first bound parameter of the transaction's first held statement (set by the proxy).
    pub about: Option<String>,
    /// The connection's number, in the order the worker opened its connections: between two
    /// held calls of the same text, the one on the connection opened first goes first (a pool
    /// hands out connections in the order its handlers asked, which the worker's own code
    /// decides, not real time).
    pub opened: u64,
}

/// What the server answered to one [`PgCall`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PgReply {
    /// CommandComplete tags, in order (`INSERT 0 1`, `SELECT 3`, `BEGIN`, `COMMIT`, `ROLLBACK`).
    pub tags: Vec<String>,
    /// DataRow messages received.
    pub rows: u64,
    /// The first ErrorResponse: its SQLSTATE and message (`23505`, `duplicate key value …`).
    pub error: Option<(String, String)>,
    /// The transaction status of the last ReadyForQuery: `I` idle, `T` in a transaction, `E`
    /// in a failed transaction (`None` after a Flush, which has no ReadyForQuery).
    pub status: Option<u8>,
}

/// The scheduler's side of a PostgreSQL proxy, one per external worker (all its connections).
#[async_trait(?Send)]
pub trait PgGate {
    /// The proxy refused a connection it cannot relay (`sslmode=require`, a direct TLS hello):
    /// `why` says what the worker must change. The run ends with exit 2 naming it.
    fn refused(&self, why: String);
    /// A connection finished its startup: `pid` is its backend pid from BackendKeyData (for
    /// `pg_blocking_pids`).
    fn backend(&self, pid: i32);
    /// Whether `call` is held for the scheduler (`false`: a pool's health check, `SET`, `SHOW`,
    /// `DISCARD ALL`, the empty query; it passes at once and is not reported).
    fn gated(&self, call: &PgCall) -> bool;
    /// Holds `call` until the scheduler grants it. `pid` is the connection's backend pid.
    async fn hold(&self, pid: i32, call: &PgCall) -> Admit;
    /// The reply of the admitted call `call` has been relayed to the worker.
    fn replied(&self, pid: i32, call: &PgCall, reply: PgReply);
    /// The proxy closed the worker's connection for a PostgreSQL outcome fault
    /// ([`Admit::LoseReply`], [`Admit::Reset`]): `call` ends with the connection error
    /// `message`.
    fn dropped(&self, pid: i32, call: &PgCall, message: &str);
    /// An exchange that is not a held call is under way (`true`: a connection's start-up, a
    /// call that passes ungated) or over.
    fn pending(&self, _on: bool) {}
    /// Bytes moved between the worker and the proxy.
    fn touch(&self) {}
    /// The connection's task ends.
    fn ended(&self) {}
    /// The client's startup message named `application_name`.
    fn client(&self, _application_name: String) {}
    /// Watches `socket`, a connection the proxy accepted, until the returned guard drops
    /// ([`crate::sim::world::Sockets`]); `None` when nobody watches.
    fn watch(&self, _socket: &tokio::net::TcpStream) -> Option<crate::sim::world::Watched> {
        None
    }
}
