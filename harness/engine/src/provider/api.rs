//! The rules of an idempotent HTTP API, written once: the compiled workloads' providers (the
//! orders workload's gateway, accounting export and mail provider) and the providers a team
//! declares in its workload file (`[[providers]]`) are both an [`Api`] built from an
//! [`ApiSpec`], whether their requests come over turmoil's simulated network
//! ([`crate::sim::net`]) or from a team's process at the wire ([`crate::sim::wire::http`]).
//!
//! An API is a list of [`Route`]s. A route that **applies** records one effect per request it
//! applies, with a reference made from its response template (`{{new ch}}` → `ch1`, `ch2`, …),
//! and deduplicates by an idempotency key when it has one ([`Idempotency`]): from a header
//! (Stripe's `Idempotency-Key`) or from a path segment (`PUT /invoices/{id}`), kept for a window
//! on the logical clock (Stripe keeps keys 24 h: "Idempotent requests", Stripe API reference).
//! A key seen again inside its window answers the stored response (or the route's `replay`
//! answer) without applying anything; with other parameters it answers `other_params` (Stripe:
//! an `idempotency_error`) when the route says so. A route that **looks up** answers from what
//! was applied: by a query parameter compared with a field of the applied requests' bodies
//! (`GET /charges?operation_id=…`, Stripe's search `query=metadata['order_id']:'…'`), or by a
//! path segment compared with an effect's reference or key (`GET /charges/{id}`).
//!
//! Everything is deterministic: references are counters, time is the logical clock, no I/O.
//!
//! Response bodies are JSON templates. A string that is exactly one placeholder becomes that
//! value (`"{{req.amount}}"` → the request's `amount` as it came); a placeholder inside a longer
//! string is replaced by its text. The placeholders ([`check_template`] says which fit where):
//!
//! | placeholder | value |
//! |---|---|
//! | `{{new <prefix>}}` | the applied effect's new reference, `<prefix>` and a counter (`{{new pi_}}` → `pi_1`); apply responses only |
//! | `{{req}}`, `{{req.<a>.<b>}}` | the request body, or one of its fields (`null` when absent) |
//! | `{{query.<name>}}`, `{{path.<name>}}`, `{{header.<name>}}` | a query parameter, a path segment named `{<name>}` in the route, a header |
//! | `{{key}}` | the request's idempotency key (empty without one) |
//! | `{{now_ms}}`, `{{now_s}}` | the logical clock, ms or s |
//! | `{{effect}}` | the stored response body of the effect found or replayed |
//! | `{{effect.id}}`, `{{effect.key}}`, `{{effect.req}}`, `{{effect.req.<a>}}` | its reference, key, the request that applied it |
//! | `{{effects}}` | the stored response bodies of every effect a lookup found, as a list |

use std::cell::RefCell;
use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{Effect, Event, Handled, Provider, Reply, Request};

/// An answer of a route: a status and a body template (module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The HTTP status, e.g. 200, 201, 400, 404, 409.
    pub status: u16,
    /// The body, a JSON template.
    pub body: Value,
}

impl Answer {
    /// `status` with `body`.
    pub fn new(status: u16, body: Value) -> Answer {
        Answer { status, body }
    }
}

/// One segment of a route's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// Matches this text exactly.
    Lit(String),
    /// `{name}`: matches any one non-empty segment, named for templates and matches.
    Param(String),
}

/// A route's path, e.g. `/v1/charges/{id}`, as segments. Errors: an empty segment, a
/// parameter with no name or twice the same name.
pub fn parse_path(path: &str) -> Result<Vec<Segment>, String> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!("expected a path starting with `/`, e.g. \"/v1/charges\", found `{path}`"));
    };
    let mut out: Vec<Segment> = Vec::new();
    for s in rest.split('/') {
        if s.is_empty() {
            return Err(format!("`{path}` has an empty segment"));
        }
        match s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            Some(name) if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                return Err(format!("`{path}`: a parameter is `{{name}}` with letters, digits and `_`"));
            }
            Some(name) if out.contains(&Segment::Param(name.into())) => {
                return Err(format!("`{path}`: parameter `{{{name}}}` appears twice"));
            }
            Some(name) => out.push(Segment::Param(name.into())),
            None => out.push(Segment::Lit(s.into())),
        }
    }
    Ok(out)
}

/// Where a route's idempotency key is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyFrom {
    /// A request header, name in lower case (`idempotency-key`). A request without it has no
    /// key and is never deduplicated.
    Header(String),
    /// The path segment `{name}` (`PUT /invoices/{id}`).
    Path(String),
}

/// How a route that applies deduplicates.
#[derive(Debug, Clone, PartialEq)]
pub struct Idempotency {
    /// Where the key is.
    pub key: KeyFrom,
    /// How long a key deduplicates after the request that applied it, logical ms (`None`:
    /// forever). Stripe: 24 h.
    pub window_ms: Option<u64>,
    /// What a key seen again with another body answers (Stripe: 400 `idempotency_error`; the
    /// orders gateway: 409). `None`: the stored response, as for the same body.
    pub other_params: Option<Answer>,
}

/// What a lookup compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// Query parameter `param` (its `{}` part when `pattern` is set, e.g.
    /// `metadata['order_id']:'{}'`), compared with the text of field `field` (dotted:
    /// `metadata.order_id`) of each applied request's body.
    Query {
        /// The query parameter.
        param: String,
        /// A pattern with one `{}`: the parameter must read as it, and the `{}` part is compared.
        pattern: Option<String>,
        /// The dotted path in the applied request body.
        field: String,
    },
    /// Path segment `{param}`, compared with each effect's reference, or with its idempotency
    /// key when `key` is true.
    Path {
        /// The path parameter.
        param: String,
        /// Compare with the key instead of the reference.
        key: bool,
    },
}

/// What a route does.
#[derive(Debug, Clone, PartialEq)]
pub enum RouteKind {
    /// Applies an effect per request, deduplicated by `idempotency` when set.
    Apply {
        /// Its deduplication rule (`None`: every request applies).
        idempotency: Option<Idempotency>,
        /// What an applied request answers; its body is stored with the effect.
        response: Answer,
        /// What a replayed key answers (`None`: the stored status and body, Stripe's rule).
        replay: Option<Answer>,
    },
    /// Answers from the effects applied so far.
    Lookup {
        /// What it compares.
        by: Match,
        /// Only the effects of these apply routes (empty: every apply route's).
        of: Vec<&'static str>,
        /// The answer when some effect matches (`None`: 200 with the first one's stored body).
        found: Option<Answer>,
        /// The answer when none does.
        missing: Answer,
    },
}

/// One route of an API.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Its label: the call's name in traces, crash point `after_<label>`, `fail@<label>`.
    pub label: &'static str,
    /// `GET`, `POST`, …, upper case.
    pub method: String,
    /// Its path ([`parse_path`]).
    pub path: Vec<Segment>,
    /// What it does.
    pub kind: RouteKind,
}

/// A webhook: the provider calls the team back. Each effect its apply route [`Webhook::on`]
/// applies queues one event, POSTed as JSON to [`Webhook::path`] on the port a process of
/// [`Webhook::role`] listens on, at least once and possibly out of order: a delivery answered
/// with anything but 2xx, or not answered, is made again later, up to
/// [`Webhook::attempts_max`] deliveries (Stripe: "Webhook endpoints … retries for up to three
/// days with an exponential back off"; its events may arrive more than once and out of order,
/// "Best practices for using webhooks"). The delivery model is [`crate::sim::net::webhook`].
#[derive(Debug, Clone, PartialEq)]
pub struct Webhook {
    /// Its label: a delivery's call label (trace, crash point `after_<label>`), unique among
    /// the workload's call labels.
    pub label: &'static str,
    /// The apply route whose effects it reports ([`Route::label`]).
    pub on: &'static str,
    /// The endpoint's path at the team's process, e.g. `/webhooks/cards`.
    pub path: String,
    /// The role ([`crate::spec::RoleKind::Endpoint`]) whose processes serve the endpoint.
    pub role: &'static str,
    /// The environment variable in which crashpoint hands the process the loopback port it
    /// must listen on (`CARDS_WEBHOOK_PORT=41234`).
    pub port_env: String,
    /// The event body, a JSON template ([`TemplateUse::Webhook`]): `{{new evt_}}` is the
    /// event's id, `{{effect}}` the applied effect's stored answer.
    pub body: Value,
    /// Deliveries of one event before the provider gives up on it (at least 1).
    pub attempts_max: u32,
}

/// An API's declaration.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiSpec {
    /// Its name: trace lane, fault target (`net:drop-response@cards`). Lower-case letters.
    pub name: &'static str,
    /// One line for `crashpoint list`.
    pub about: &'static str,
    /// The environment variable a team's process finds its base URL in
    /// ([`Provider::url_env`]).
    pub url_env: String,
    /// Its routes: a request takes the one whose method and path match with the most literal
    /// segments (`/search` before `/{id}`), the first declared among equals.
    pub routes: Vec<Route>,
    /// The webhooks it sends (none for most).
    pub webhooks: Vec<Webhook>,
}

/// One effect applied, with what answered it.
#[derive(Debug, Clone)]
struct Applied {
    route: &'static str,
    key: String,
    t_ms: u64,
    request: Value,
    reference: String,
    status: u16,
    body: Value,
}

/// An idempotent HTTP API following an [`ApiSpec`]; one value serves one schedule.
pub struct Api {
    spec: ApiSpec,
    ledger: RefCell<Vec<Applied>>,
    counters: RefCell<BTreeMap<String, u64>>,
}

impl Api {
    /// An API with nothing applied yet.
    pub fn new(spec: ApiSpec) -> Api {
        Api { spec, ledger: RefCell::default(), counters: RefCell::default() }
    }

    /// Its declaration.
    pub fn spec(&self) -> &ApiSpec {
        &self.spec
    }

    /// The route `req` takes, with its path parameters: of the routes whose method and path
    /// match, the one with the most literal segments (`/search` before `/{id}`), the first
    /// declared among equals.
    fn route_of(&self, req: &Request) -> Option<(&Route, BTreeMap<String, String>)> {
        let parts: Vec<&str> = req.path.trim_start_matches('/').split('/').collect();
        let mut best: Option<(usize, &Route, BTreeMap<String, String>)> = None;
        for r in self.spec.routes.iter().filter(|r| r.method.eq_ignore_ascii_case(&req.method) && r.path.len() == parts.len()) {
            let mut params = BTreeMap::new();
            let mut literal = 0;
            let fits = r.path.iter().zip(&parts).all(|(seg, part)| match seg {
                Segment::Lit(l) => {
                    literal += 1;
                    l == part
                }
                Segment::Param(n) if !part.is_empty() => {
                    params.insert(n.clone(), (*part).to_string());
                    true
                }
                Segment::Param(_) => false,
            });
            if fits && best.as_ref().is_none_or(|(l, _, _)| literal > *l) {
                best = Some((literal, r, params));
            }
        }
        best.map(|(_, r, p)| (r, p))
    }

    fn apply(&self, route: &Route, req: &Request, params: &BTreeMap<String, String>, now: u64) -> Handled {
        let RouteKind::Apply { idempotency, response, replay } = &route.kind else { unreachable!("called for apply routes") };
        let key = match idempotency.as_ref().map(|i| &i.key) {
            Some(KeyFrom::Header(h)) => req.headers.get(h).cloned().unwrap_or_default(),
            Some(KeyFrom::Path(p)) => params.get(p).cloned().unwrap_or_default(),
            None => String::new(),
        };
        fn scope<'a>(req: &'a Request, params: &'a BTreeMap<String, String>, key: &'a str, now_ms: u64, effect: Option<&'a Applied>) -> Scope<'a> {
            Scope { req, params, key, now_ms, effect, effects: vec![] }
        }
        if let (Some(rule), false) = (idempotency, key.is_empty()) {
            let ledger = self.ledger.borrow();
            let live = ledger.iter().rev().find(|a| a.key == key && rule.window_ms.is_none_or(|ms| now < a.t_ms + ms));
            if let Some(a) = live {
                let other = a.request != req.body || a.route != route.label;
                if let (true, Some(conflict)) = (other, &rule.other_params) {
                    let reply = render_answer(conflict, &scope(req, params, &key, now, Some(a)), None);
                    return handled(reply, format!("key {key} reused with other parameters: conflict"), route, &key, None);
                }
                let reply = match replay {
                    Some(r) => render_answer(r, &scope(req, params, &key, now, Some(a)), None),
                    None => Reply::new(a.status, a.body.clone()),
                };
                return handled(reply, format!("key {key} replayed: {}", a.reference), route, &key, None);
            }
        }
        let reference = self.next_reference(&new_prefix(&response.body).unwrap_or_else(|| format!("{}-", route.label)));
        let reply = render_answer(response, &scope(req, params, &key, now, None), Some(&reference));
        let applied = Applied {
            route: route.label,
            key: key.clone(),
            t_ms: now,
            request: req.body.clone(),
            reference: reference.clone(),
            status: reply.status,
            body: reply.body.clone(),
        };
        let events: Vec<Event> = self
            .spec
            .webhooks
            .iter()
            .filter(|w| w.on == route.label)
            .map(|w| {
                let id = self.next_reference(&new_prefix(&w.body).unwrap_or_else(|| format!("{}-", w.label)));
                let body = render(&w.body, &scope(req, params, &key, now, Some(&applied)), Some(&id));
                Event { provider: self.spec.name, webhook: w.label, id, about: reference.clone(), body }
            })
            .collect();
        self.ledger.borrow_mut().push(applied);
        let under = if key.is_empty() { "without a key".to_string() } else { format!("under key {key}") };
        let mut h = handled(reply, format!("{reference} applied {under}"), route, &key, Some(reference));
        h.events = events;
        h
    }

    /// `prefix` and the next number of its counter (`pi_1`, `pi_2`, …).
    fn next_reference(&self, prefix: &str) -> String {
        let mut c = self.counters.borrow_mut();
        let n = c.entry(prefix.to_string()).or_insert(0);
        *n += 1;
        format!("{prefix}{n}")
    }

    fn lookup(&self, route: &Route, req: &Request, params: &BTreeMap<String, String>, now: u64) -> Handled {
        let RouteKind::Lookup { by, of, found, missing } = &route.kind else { unreachable!("called for lookup routes") };
        let wanted = match by {
            Match::Query { param, pattern, .. } => {
                let value = req.query.get(param).map(String::as_str);
                let value = match pattern.as_deref().and_then(|p| p.split_once("{}")) {
                    Some((before, after)) => value.and_then(|v| v.strip_prefix(before)).and_then(|v| v.strip_suffix(after)),
                    None => value,
                };
                match (value, req.query.get(param), pattern) {
                    (Some(v), _, _) => v.to_string(),
                    (None, Some(got), Some(p)) => {
                        let reply = Reply::new(400, json!({"error": format!("{param} `{got}` does not read as `{p}`")}));
                        return handled(reply, format!("lookup: {param} does not read as `{p}`"), route, "", None);
                    }
                    (None, _, _) => {
                        let reply = Reply::new(400, json!({"error": format!("{param} is required")}));
                        return handled(reply, format!("lookup without {param}"), route, "", None);
                    }
                }
            }
            Match::Path { param, .. } => params.get(param).cloned().unwrap_or_default(),
        };
        let ledger = self.ledger.borrow();
        let hits: Vec<&Applied> = ledger
            .iter()
            .filter(|a| of.is_empty() || of.contains(&a.route))
            .filter(|a| match by {
                Match::Query { field, .. } => text_of(pointer(&a.request, field)).as_deref() == Some(wanted.as_str()),
                Match::Path { key: true, .. } => a.key == wanted,
                Match::Path { key: false, .. } => a.reference == wanted,
            })
            .collect();
        let scope = Scope { req, params, key: "", now_ms: now, effect: hits.first().copied(), effects: hits.clone() };
        match (hits.first(), found) {
            (Some(a), Some(f)) => handled(render_answer(f, &scope, None), format!("lookup: {}", a.reference), route, "", None),
            (Some(a), None) => handled(Reply::new(200, a.body.clone()), format!("lookup: {}", a.reference), route, "", None),
            (None, _) => handled(render_answer(missing, &scope, None), "lookup: not found".into(), route, "", None),
        }
    }
}

/// `route` in one line: label, method and path, what it does.
fn describe(route: &Route) -> String {
    let path: String = route
        .path
        .iter()
        .map(|s| match s {
            Segment::Lit(l) => format!("/{l}"),
            Segment::Param(p) => format!("/{{{p}}}"),
        })
        .collect();
    let what = match &route.kind {
        RouteKind::Apply { idempotency: None, .. } => "apply, every request".to_string(),
        RouteKind::Apply { idempotency: Some(i), .. } => {
            let key = match &i.key {
                KeyFrom::Header(h) => format!("key in header {h}"),
                KeyFrom::Path(p) => format!("key in {{{p}}}"),
            };
            let window = i.window_ms.map_or("forever".to_string(), |ms| format!("for {}", crate::duration::format_duration_ms(ms)));
            format!("apply, {key} {window}")
        }
        RouteKind::Lookup { by: Match::Query { param, field, .. }, .. } => format!("lookup, query {param} against {field}"),
        RouteKind::Lookup { by: Match::Path { param, key }, .. } => {
            format!("lookup, {{{param}}} against the effect's {}", if *key { "key" } else { "reference" })
        }
    };
    format!("{:<16} {} {path}  {what}", route.label, route.method)
}

fn handled(reply: Reply, text: String, route: &Route, key: &str, applied: Option<String>) -> Handled {
    Handled { reply, text, route: Some(route.label), key: key.to_string(), applied, events: Vec::new() }
}

impl Provider for Api {
    fn name(&self) -> &'static str {
        self.spec.name
    }

    fn about(&self) -> &'static str {
        self.spec.about
    }

    fn url_env(&self) -> String {
        self.spec.url_env.clone()
    }

    fn route(&self, request: &Request) -> Option<&'static str> {
        self.route_of(request).map(|(r, _)| r.label)
    }

    fn routes(&self) -> Vec<String> {
        self.spec.routes.iter().map(describe).collect()
    }

    fn route_labels(&self) -> Vec<(&'static str, bool)> {
        self.spec.routes.iter().map(|r| (r.label, matches!(r.kind, RouteKind::Apply { .. }))).collect()
    }

    fn handle(&self, req: &Request, now_ms: u64) -> Handled {
        match self.route_of(req) {
            Some((route, params)) => match route.kind {
                RouteKind::Apply { .. } => self.apply(route, req, &params, now_ms),
                RouteKind::Lookup { .. } => self.lookup(route, req, &params, now_ms),
            },
            None => Handled::new(Reply::new(404, json!({"error": "no such route"})), format!("no route {} {}", req.method, req.path)),
        }
    }

    fn webhooks(&self) -> Vec<Webhook> {
        self.spec.webhooks.clone()
    }

    fn effects(&self) -> Vec<Effect> {
        self.ledger
            .borrow()
            .iter()
            .map(|a| Effect {
                provider: self.spec.name,
                route: a.route,
                t_ms: a.t_ms,
                reference: a.reference.clone(),
                key: a.key.clone(),
                body: a.request.clone(),
            })
            .collect()
    }
}

/// What a template's placeholders read.
struct Scope<'a> {
    req: &'a Request,
    params: &'a BTreeMap<String, String>,
    key: &'a str,
    now_ms: u64,
    effect: Option<&'a Applied>,
    effects: Vec<&'a Applied>,
}

/// Where a placeholder may stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateUse {
    /// An apply route's response: `{{new …}}` allowed, no effect in scope.
    Response,
    /// A replay, a conflict or a lookup's answer: an effect in scope, no `{{new …}}`.
    Found,
    /// A lookup's answer when nothing matched: neither.
    Missing,
    /// A webhook's event body ([`Webhook::body`]): the applied effect in scope (`{{effect…}}`,
    /// and the request that applied it as `{{req…}}`), `{{new <prefix>}}` the event's id.
    Webhook,
}

/// Checks every placeholder of template `body` for `place`. Errors: the first one that is
/// unknown or does not fit there, with what was expected.
pub fn check_template(body: &Value, place: TemplateUse) -> Result<(), String> {
    let mut prefixes: Vec<String> = Vec::new();
    walk(body, &mut |p| {
        if let Some(x) = p.strip_prefix("new ").map(str::trim) {
            if !prefixes.iter().any(|y| y == x) {
                prefixes.push(x.to_string());
            }
        }
    });
    if prefixes.len() > 1 {
        return Err(format!(
            "`{{{{new {}}}}}` and `{{{{new {}}}}}`: an applied request has one reference; expected one `{{{{new <prefix>}}}}` (repeat it where the same id stands twice)",
            prefixes[0], prefixes[1]
        ));
    }
    let mut result = Ok(());
    walk(body, &mut |p| {
        if result.is_err() {
            return;
        }
        let fit = fits(p, place);
        let ok = fit == Some(true);
        if !ok {
            result = Err(format!(
                "placeholder `{{{{{p}}}}}` {}; expected {}",
                if fit.is_some() { "cannot stand here" } else { "is unknown" },
                match place {
                    TemplateUse::Response => "`{{new <prefix>}}`, `{{req.<field>}}`, `{{query.<name>}}`, `{{path.<name>}}`, `{{header.<name>}}`, `{{key}}`, `{{now_s}}`",
                    TemplateUse::Found => "`{{effect}}`, `{{effect.id}}`, `{{effect.req.<field>}}`, `{{effects}}`, `{{req.<field>}}`, `{{query.<name>}}`, `{{path.<name>}}`, `{{key}}`, `{{now_s}}`",
                    TemplateUse::Missing => "`{{req.<field>}}`, `{{query.<name>}}`, `{{path.<name>}}`, `{{now_s}}`",
                    TemplateUse::Webhook => "`{{new <prefix>}}` (the event's id), `{{effect}}`, `{{effect.id}}`, `{{effect.req.<field>}}`, `{{req.<field>}}`, `{{key}}`, `{{now_s}}`",
                }
            ));
        }
    });
    result
}

/// Whether placeholder `p` fits `place`; `None` when it is no placeholder at all.
fn fits(p: &str, place: TemplateUse) -> Option<bool> {
    if let Some(prefix) = p.strip_prefix("new ") {
        return Some(matches!(place, TemplateUse::Response | TemplateUse::Webhook) && !prefix.trim().is_empty());
    }
    let (head, rest) = p.split_once('.').unwrap_or((p, ""));
    match head {
        "req" => Some(true),
        "key" | "now_ms" | "now_s" if rest.is_empty() => Some(true),
        "query" | "path" | "header" if !rest.is_empty() => Some(place != TemplateUse::Webhook),
        "effect" => Some(matches!(place, TemplateUse::Found | TemplateUse::Webhook)),
        "effects" if rest.is_empty() => Some(place == TemplateUse::Found),
        _ => None,
    }
}

/// Calls `f` with each placeholder's inner text (trimmed) in `body`.
fn walk(body: &Value, f: &mut impl FnMut(&str)) {
    match body {
        Value::String(s) => {
            let mut rest = s.as_str();
            while let Some(i) = rest.find("{{") {
                let Some(j) = rest[i..].find("}}") else { break };
                f(rest[i + 2..i + j].trim());
                rest = &rest[i + j + 2..];
            }
        }
        Value::Array(items) => items.iter().for_each(|v| walk(v, f)),
        Value::Object(m) => m.values().for_each(|v| walk(v, f)),
        _ => {}
    }
}

/// The prefix of the first `{{new <prefix>}}` in `body`.
fn new_prefix(body: &Value) -> Option<String> {
    let mut found = None;
    walk(body, &mut |p| {
        if found.is_none() {
            found = p.strip_prefix("new ").map(|s| s.trim().to_string());
        }
    });
    found
}

fn render_answer(a: &Answer, scope: &Scope, reference: Option<&str>) -> Reply {
    Reply::new(a.status, render(&a.body, scope, reference))
}

fn render(body: &Value, scope: &Scope, reference: Option<&str>) -> Value {
    match body {
        Value::String(s) => {
            let t = s.trim();
            if t.starts_with("{{") && t.ends_with("}}") && t[2..].find("}}") == Some(t.len() - 4) {
                return value_of(t[2..t.len() - 2].trim(), scope, reference);
            }
            let mut out = String::new();
            let mut rest = s.as_str();
            while let Some(i) = rest.find("{{") {
                let Some(j) = rest[i..].find("}}") else { break };
                out.push_str(&rest[..i]);
                out.push_str(&text_of(&value_of(rest[i + 2..i + j].trim(), scope, reference)).unwrap_or_default());
                rest = &rest[i + j + 2..];
            }
            out.push_str(rest);
            Value::String(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| render(v, scope, reference)).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), render(v, scope, reference))).collect()),
        other => other.clone(),
    }
}

fn value_of(p: &str, scope: &Scope, reference: Option<&str>) -> Value {
    let (head, rest) = p.split_once('.').unwrap_or((p, ""));
    let opt = |s: Option<&String>| s.map_or(Value::Null, |s| Value::String(s.clone()));
    match head {
        _ if p.starts_with("new ") => reference.map_or(Value::Null, |r| Value::String(r.into())),
        "req" => pointer(&scope.req.body, rest).clone(),
        "query" => opt(scope.req.query.get(rest)),
        "path" => opt(scope.params.get(rest)),
        "header" => opt(scope.req.headers.get(&rest.to_ascii_lowercase())),
        "key" => Value::String(scope.key.into()),
        "now_ms" => json!(scope.now_ms),
        "now_s" => json!(scope.now_ms / 1000),
        "effects" => Value::Array(scope.effects.iter().map(|a| a.body.clone()).collect()),
        "effect" => match (scope.effect, rest.split_once('.').unwrap_or((rest, ""))) {
            (None, _) => Value::Null,
            (Some(a), ("", _)) => a.body.clone(),
            (Some(a), ("id", _)) => Value::String(a.reference.clone()),
            (Some(a), ("key", _)) => Value::String(a.key.clone()),
            (Some(a), ("req", field)) => pointer(&a.request, field).clone(),
            (Some(a), _) => pointer(&a.body, rest).clone(),
        },
        _ => Value::Null,
    }
}

/// Field `dotted` (`a.b.c`; empty: the whole value) of `v`, `null` when absent.
fn pointer<'v>(v: &'v Value, dotted: &str) -> &'v Value {
    static NULL: Value = Value::Null;
    if dotted.is_empty() {
        return v;
    }
    dotted.split('.').try_fold(v, |v, k| match v {
        Value::Object(m) => m.get(k),
        Value::Array(a) => k.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
    .unwrap_or(&NULL)
}

/// A scalar's text (`"a"` → `a`, `5` → `5`); `None` for null, arrays and objects.
fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stripe() -> Api {
        let conflict = Answer::new(400, json!({"error": {"type": "idempotency_error"}}));
        Api::new(ApiSpec {
            name: "cards",
            about: "cards",
            url_env: "CARDS_API_BASE".into(),
            webhooks: Vec::new(),
            routes: vec![
                Route {
                    label: "charge",
                    method: "POST".into(),
                    path: parse_path("/v1/payment_intents").unwrap(),
                    kind: RouteKind::Apply {
                        idempotency: Some(Idempotency { key: KeyFrom::Header("idempotency-key".into()), window_ms: Some(86_400_000), other_params: Some(conflict) }),
                        response: Answer::new(200, json!({"id": "{{new pi_}}", "amount": "{{req.amount}}", "note": "for {{req.metadata.order_id}}"})),
                        replay: None,
                    },
                },
                Route {
                    label: "search",
                    method: "GET".into(),
                    path: parse_path("/v1/payment_intents/search").unwrap(),
                    kind: RouteKind::Lookup {
                        by: Match::Query { param: "query".into(), pattern: Some("metadata['order_id']:'{}'".into()), field: "metadata.order_id".into() },
                        of: vec![],
                        found: Some(Answer::new(200, json!({"object": "search_result", "data": "{{effects}}"}))),
                        missing: Answer::new(200, json!({"object": "search_result", "data": []})),
                    },
                },
                Route {
                    label: "get",
                    method: "GET".into(),
                    path: parse_path("/v1/payment_intents/{id}").unwrap(),
                    kind: RouteKind::Lookup { by: Match::Path { param: "id".into(), key: false }, of: vec![], found: None, missing: Answer::new(404, json!({"error": {"type": "invalid_request_error"}})) },
                },
            ],
        })
    }

    fn charge(key: &str, order: &str) -> Request {
        Request::new("POST", "/v1/payment_intents").header("Idempotency-Key", key).json(json!({"amount": "1000", "metadata": {"order_id": order}}))
    }

    #[test]
    fn a_key_replays_the_stored_response_conflicts_on_other_parameters_and_expires_with_its_window() {
        let api = stripe();
        let first = api.handle(&charge("k", "o1"), 0);
        assert_eq!(first.reply, Reply::new(200, json!({"id": "pi_1", "amount": "1000", "note": "for o1"})));
        assert_eq!((first.route, first.applied.as_deref(), first.key.as_str()), (Some("charge"), Some("pi_1"), "k"));
        let again = api.handle(&charge("k", "o1"), 1000);
        assert_eq!(again.reply, first.reply, "Stripe returns the stored response");
        assert_eq!(again.applied, None);
        assert_eq!(api.handle(&charge("k", "o2"), 1000).reply.status, 400);
        assert_eq!(api.effects().len(), 1);
        assert_eq!(api.handle(&charge("k", "o1"), 86_400_000).applied.as_deref(), Some("pi_2"), "a key past its window is new");
        let none = api.handle(&Request::new("POST", "/v1/payment_intents").json(json!({"amount": "5"})), 0);
        assert_eq!((none.applied.as_deref(), none.text.as_str()), (Some("pi_3"), "pi_3 applied without a key"));
    }

    #[test]
    fn lookups_answer_from_what_was_applied() {
        let api = stripe();
        api.handle(&charge("k", "o1"), 0);
        let search = |q: &str| api.handle(&Request::new("GET", "/v1/payment_intents/search").query("query", q), 0).reply;
        assert_eq!(search("metadata['order_id']:'o1'").body["data"][0]["id"], "pi_1");
        assert_eq!(search("metadata['order_id']:'o2'").body, json!({"object": "search_result", "data": []}));
        assert_eq!(search("status:'succeeded'").status, 400, "a query the pattern does not read");
        assert_eq!(api.handle(&Request::new("GET", "/v1/payment_intents/pi_1"), 0).reply.body["note"], "for o1");
        assert_eq!(api.handle(&Request::new("GET", "/v1/payment_intents/pi_9"), 0).reply.status, 404);
        assert_eq!(api.route(&Request::new("DELETE", "/v1/payment_intents")), None);
        assert_eq!(api.route(&Request::new("GET", "/v1/payment_intents/pi_1")), Some("get"));
    }

    #[test]
    fn templates_are_checked_where_they_stand() {
        assert!(check_template(&json!({"id": "{{new ch}}", "a": "{{req.amount}}"}), TemplateUse::Response).is_ok());
        let e = check_template(&json!({"id": "{{effect.id}}"}), TemplateUse::Response).unwrap_err();
        assert!(e.contains("`{{effect.id}}` cannot stand here"), "{e}");
        let e = check_template(&json!(["{{bogus}}"]), TemplateUse::Found).unwrap_err();
        assert!(e.contains("`{{bogus}}` is unknown"), "{e}");
        assert!(check_template(&json!({"d": "{{effects}}"}), TemplateUse::Found).is_ok());
        assert!(check_template(&json!({"d": "{{new x}}"}), TemplateUse::Missing).is_err());
        let e = check_template(&json!({"id": "{{new pi_}}", "charge": "{{new ch_}}"}), TemplateUse::Response).unwrap_err();
        assert!(e.contains("an applied request has one reference"), "{e}");
        assert!(parse_path("v1/x").is_err() && parse_path("/a//b").is_err() && parse_path("/a/{}").is_err());
    }
}
