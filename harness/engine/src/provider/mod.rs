//! External providers: the payment gateways, accounting systems and mail APIs a handler calls
//! over HTTP, whose effects do not roll back with a PostgreSQL transaction (the orders article).
//!
//! A workload declares its providers ([`crate::workload::Workload::providers`]); the engine
//! runs each as a turmoil host named [`Provider::name`] with an HTTP/1 server (hyper over
//! turmoil's simulated TCP, port [`PORT`]), and workers reach it with
//! [`crate::sim::cx::Cx::http`] over the simulated network, where the nemesis drops, delays
//! and partitions messages ([`crate::nemesis::net`]). PostgreSQL, SQS and Redis stay real.
//!
//! A provider is deterministic: it answers from its own state and the logical clock, with no
//! I/O, so the same schedule gives the same provider interleaving. It keeps a ledger of the
//! effects it applied, which the checker reads after the drain ([`crate::checker::CheckCx::effects`]).

pub mod api;

use std::collections::BTreeMap;

/// The port every provider listens on, on its turmoil host.
pub const PORT: u16 = 80;

/// An HTTP request to a provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, `PUT`, …
    pub method: String,
    /// The path, e.g. `/charges`.
    pub path: String,
    /// The query parameters (`?operation_id=…`), decoded.
    pub query: BTreeMap<String, String>,
    /// The headers, names in lower case (e.g. `idempotency-key`).
    pub headers: BTreeMap<String, String>,
    /// The JSON body (`null` when there is none).
    pub body: serde_json::Value,
}

impl Request {
    /// A request with no query, headers or body.
    pub fn new(method: &str, path: &str) -> Request {
        Request { method: method.into(), path: path.into(), query: BTreeMap::new(), headers: BTreeMap::new(), body: serde_json::Value::Null }
    }

    /// With header `name` (stored in lower case).
    pub fn header(mut self, name: &str, value: impl Into<String>) -> Request {
        self.headers.insert(name.to_ascii_lowercase(), value.into());
        self
    }

    /// With query parameter `name`.
    pub fn query(mut self, name: &str, value: impl Into<String>) -> Request {
        self.query.insert(name.into(), value.into());
        self
    }

    /// With a JSON body.
    pub fn json(mut self, body: serde_json::Value) -> Request {
        self.body = body;
        self
    }

    /// `path?k=v&…` as a reader writes it, the query not encoded (for the providers' lanes of a
    /// trace: `search?query=metadata['order_id']:'o1'`).
    pub fn shown(&self) -> String {
        let q: Vec<String> = self.query.iter().map(|(k, v)| format!("{k}={v}")).collect();
        match q.is_empty() {
            true => self.path.clone(),
            false => format!("{}?{}", self.path, q.join("&")),
        }
    }

    /// `path?k=v&…`, the query encoded (for the wire and the trace).
    pub fn target(&self) -> String {
        if self.query.is_empty() {
            return self.path.clone();
        }
        let q: Vec<String> = self
            .query
            .iter()
            .map(|(k, v)| format!("{}={}", url::form_urlencoded::byte_serialize(k.as_bytes()).collect::<String>(), url::form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>()))
            .collect();
        format!("{}?{}", self.path, q.join("&"))
    }
}

/// A provider's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status, e.g. 201, 404, 409, 503.
    pub status: u16,
    /// The JSON body (`null` when there is none).
    pub body: serde_json::Value,
}

impl Reply {
    /// A reply with `status` and `body`.
    pub fn new(status: u16, body: serde_json::Value) -> Reply {
        Reply { status, body }
    }
}

/// What a provider did with one request, for its timeline lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled {
    /// The answer.
    pub reply: Reply,
    /// One line for the trace, ids as they are (the engine relabels them), e.g.
    /// `charge ch1 applied for key <uuid>` or `key <uuid> replayed: ch1`.
    pub text: String,
    /// The label of the route the request took ([`Provider::route`]; `None`: none).
    pub route: Option<&'static str>,
    /// The request's idempotency key (empty: none).
    pub key: String,
    /// The reference of the effect the request applied (`None`: it applied nothing: a
    /// replayed key, a conflict, a lookup).
    pub applied: Option<String>,
    /// The webhook events the applied effect queued ([`api::Webhook`]), in declaration order.
    pub events: Vec<Event>,
}

impl Handled {
    /// `reply` with trace line `text`, no route, key, effect or event.
    pub fn new(reply: Reply, text: String) -> Handled {
        Handled { reply, text, route: None, key: String::new(), applied: None, events: Vec::new() }
    }
}

/// A webhook event a provider queued when it applied an effect ([`api::Webhook`]): delivered
/// to the team's endpoint at least once ([`crate::sim::net::webhook`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The provider that sends it (`cards`).
    pub provider: &'static str,
    /// Its webhook's label ([`api::Webhook::label`]): the delivery's call label.
    pub webhook: &'static str,
    /// Its id (`evt_1`), from the webhook body's `{{new <prefix>}}`, else `<label>-<n>`.
    pub id: String,
    /// The effect's reference it is about (`pi_1`).
    pub about: String,
    /// The JSON body POSTed to the endpoint.
    pub body: serde_json::Value,
}

/// One request a provider received, as the facts table `crashpoint_provider_calls` has it
/// ([`crate::checker::facts`]): filled by every front-end, in the order they arrived.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Call {
    /// The provider, e.g. `cards`.
    pub provider: &'static str,
    /// Its route's label (`charge`; empty when it took none).
    pub route: String,
    /// Its idempotency key (empty: none).
    pub idempotency_key: String,
    /// Its JSON body (a form body decoded into objects).
    pub body: serde_json::Value,
    /// Whether it applied an effect.
    pub applied: bool,
    /// What the provider answered, even when that answer was then lost or replaced by an
    /// injected 503 after applying; 503 for an injected 503 before applying; `None` when the
    /// request never reached the provider (dropped on its way, partitioned).
    pub status: Option<u16>,
    /// The effect's reference when it applied one (`pi_1`).
    pub reference: Option<String>,
    /// When it arrived, logical ms.
    pub t_ms: u64,
}

/// One effect a provider applied: a charge made, an invoice recorded, an email sent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Effect {
    /// The provider, e.g. `gateway`.
    pub provider: &'static str,
    /// The label of the route that applied it, e.g. `charge`.
    pub route: &'static str,
    /// When it was applied, logical ms.
    pub t_ms: u64,
    /// The provider's reference of it, e.g. `ch1`.
    pub reference: String,
    /// The idempotency key it was applied under (empty when the request had none).
    pub key: String,
    /// The request body that caused it.
    pub body: serde_json::Value,
}

/// An external provider of a workload. One value serves one schedule: the workload makes
/// fresh ones per schedule ([`crate::workload::Workload::providers`]).
pub trait Provider {
    /// Its name: the turmoil host name workers call (`gateway`), and the target of network
    /// faults (`net:drop-response@gateway`). Lower-case letters.
    fn name(&self) -> &'static str;

    /// One line for `crashpoint list`, e.g. `payment gateway: POST /charges with Idempotency-Key`.
    fn about(&self) -> &'static str;

    /// The environment variable a team's process finds the provider's base URL in
    /// (`http://127.0.0.1:<port>`, [`crate::sim::wire`]). Default
    /// `CRASHPOINT_PROVIDER_URL_<NAME>`.
    fn url_env(&self) -> String {
        format!("CRASHPOINT_PROVIDER_URL_{}", self.name().to_ascii_uppercase())
    }

    /// The label of the route `request` takes: its call label at the wire (trace, crash point
    /// `after_<label>`). `None`: the provider has no such route, and a team's process that
    /// sends it ends the run with exit 2 ([`crate::sim::wire`]). Default `None`.
    fn route(&self, _request: &Request) -> Option<&'static str> {
        None
    }

    /// One line per route for `crashpoint list` (`charge  POST /v1/charges  apply, key
    /// Idempotency-Key for 24h`). Default none.
    fn routes(&self) -> Vec<String> {
        Vec::new()
    }

    /// Its routes' labels, each with whether it applies effects: the targets of route-aimed
    /// faults (`net:drop-response@cards/charge`, [`crate::nemesis::net`]). Default none.
    fn route_labels(&self) -> Vec<(&'static str, bool)> {
        Vec::new()
    }

    /// Handles one request at logical time `now_ms` (its clock is the schedule's logical clock).
    /// Deterministic: no I/O, no randomness.
    fn handle(&self, request: &Request, now_ms: u64) -> Handled;

    /// The effects applied so far, in order.
    fn effects(&self) -> Vec<Effect>;

    /// The webhooks it sends ([`api::Webhook`]); none by default.
    fn webhooks(&self) -> Vec<api::Webhook> {
        Vec::new()
    }
}
