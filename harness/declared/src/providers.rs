//! A workload file's `[[providers]]`: a team's HTTP API dependencies (a payment provider, a
//! mail API), read into the engine's one model of an idempotent API
//! ([`crashpoint::http_api`]), so that a declared provider follows the same rules as a compiled
//! workload's. Every mistake names the file, the line and the field.
//!
//! ```toml
//! [[providers]]
//! name = "cards"                       # lower-case letters: trace lane, net:drop-response@cards
//! url_env = "CARDS_API_BASE"           # the worker finds http://127.0.0.1:<port> here
//! about = "the card processor"
//!
//! [[providers.routes]]
//! label = "charge"                     # the call's label: trace, after_charge, fail@charge
//! method = "POST"
//! path = "/v1/payment_intents"         # `{id}` matches one segment
//! effect = "apply"                     # one effect per applied request
//! idempotency = { header = "Idempotency-Key", window = "24h", other_params = { status = 400 } }
//! response = { status = 200, body = { id = "{{new pi_}}", amount = "{{req.amount}}" } }
//! # replay = { status = 200, body = … }   default: the stored response again (Stripe)
//!
//! [[providers.routes]]
//! label = "charge_search"
//! method = "GET"
//! path = "/v1/payment_intents/search"
//! effect = "lookup"
//! match = { query = "query", pattern = "metadata['order_id']:'{}'", field = "metadata.order_id" }
//! found = { status = 200, body = { data = "{{effects}}" } }
//! missing = { status = 200, body = { data = [] } }
//! # match = { path = "id" }  (an effect's reference; on = "key": its idempotency key)
//! # of = ["charge"]          (only these apply routes' effects)
//!
//! [[providers.webhooks]]               # the provider calls the team back
//! label = "payment_succeeded"          # the delivery's label: trace, after_payment_succeeded
//! on = "charge"                        # one event per effect this apply route applies
//! role = "w"                           # a role with kind = "endpoint" serves it
//! port_env = "CARDS_WEBHOOK_PORT"      # the process listens on the port crashpoint puts here
//! path = "/webhooks/cards"             # crashpoint POSTs each event there as JSON
//! body = { id = "{{new evt_}}", type = "payment_intent.succeeded", data = { object = "{{effect}}" } }
//! retry = { max = 10 }                 # deliveries of one event before the provider gives up
//! ```

use std::path::Path;

use anyhow::{anyhow, bail, Result};
use serde::Deserialize;
use toml::Spanned;

use crashpoint::files::line_of;
use crashpoint::http_api::{
    check_template, parse_path, Answer, ApiSpec, Idempotency, KeyFrom, Match, Route, RouteKind, Segment, TemplateUse,
    Webhook,
};

/// One `[[providers]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderRaw {
    name: String,
    url_env: String,
    #[serde(default)]
    about: Option<String>,
    #[serde(default)]
    routes: Vec<Spanned<RouteRaw>>,
    #[serde(default)]
    webhooks: Vec<Spanned<WebhookRaw>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhookRaw {
    label: String,
    on: String,
    path: String,
    role: String,
    port_env: String,
    body: toml::Value,
    #[serde(default)]
    retry: Option<RetryRaw>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryRaw {
    max: u32,
}

/// Deliveries of one event before the provider gives up, when `retry` does not say.
const ATTEMPTS_DEFAULT: u32 = 10;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteRaw {
    label: String,
    method: String,
    path: String,
    effect: String,
    #[serde(default)]
    idempotency: Option<IdempotencyRaw>,
    #[serde(default)]
    response: Option<AnswerRaw>,
    #[serde(default)]
    replay: Option<AnswerRaw>,
    #[serde(default, rename = "match")]
    by: Option<MatchRaw>,
    #[serde(default)]
    of: Vec<String>,
    #[serde(default)]
    found: Option<AnswerRaw>,
    #[serde(default)]
    missing: Option<AnswerRaw>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IdempotencyRaw {
    #[serde(default)]
    header: Option<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    window: Option<String>,
    #[serde(default)]
    other_params: Option<AnswerRaw>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerRaw {
    status: u16,
    #[serde(default)]
    body: Option<toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatchRaw {
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    pattern: Option<String>,
    #[serde(default)]
    field: Option<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    on: Option<String>,
}

const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Reads the file's `[[providers]]` (`raw`, with their spans in `text` of `path`) into API
/// declarations, checked: names (none a role prefix of `roles`: workers and providers share the
/// simulation's host names), environment variables, routes, templates, webhooks (each served
/// by one of the `endpoints` roles, one webhook per role).
pub fn read(
    path: &Path,
    text: &str,
    raw: &[Spanned<ProviderRaw>],
    roles: &[&str],
    endpoints: &[&'static str],
) -> Result<Vec<ApiSpec>> {
    let mut out: Vec<ApiSpec> = Vec::new();
    let mut labels: Vec<&str> = Vec::new();
    let mut served: Vec<&str> = Vec::new();
    for (i, p) in raw.iter().enumerate() {
        let span = p.span();
        let p = p.get_ref();
        let here = |f: &str| {
            format!("{}:{}: field `providers[{i}].{f}` ({})", path.display(), field_line(text, &span, f), p.name)
        };
        if p.name.is_empty() || !p.name.chars().all(|c| c.is_ascii_lowercase()) {
            bail!(
                "{}: expected a provider name of lower-case letters (faults name it: `net:drop-response@{}`)",
                here("name"),
                p.name
            );
        }
        if out.iter().any(|o| o.name == p.name) {
            bail!("{}: provider `{}` is declared twice", here("name"), p.name);
        }
        if roles.contains(&p.name.as_str()) {
            bail!(
                "{}: `{}` is a role of this file, whose worker bears that name; expected another name",
                here("name"),
                p.name
            );
        }
        if !env_name(&p.url_env) {
            bail!("{}: expected an environment variable name such as \"CARDS_API_BASE\" (upper case, digits, `_`), found `{}`", here("url_env"), p.url_env);
        }
        if out.iter().any(|o| o.url_env == p.url_env) {
            bail!("{}: `{}` is the url_env of another provider too", here("url_env"), p.url_env);
        }
        if p.routes.is_empty() {
            bail!("{}: expected at least one [[providers.routes]] table (label, method, path, effect)", here("routes"));
        }
        let mut routes: Vec<Route> = Vec::new();
        for (j, r) in p.routes.iter().enumerate() {
            let span = r.span();
            let r = r.get_ref();
            let at = |f: &str| {
                format!(
                    "{}:{}: field `providers[{i}].routes[{j}].{f}` ({}: {})",
                    path.display(),
                    field_line(text, &span, f),
                    p.name,
                    r.label
                )
            };
            let route = route(r, &routes, &at)?;
            if labels.contains(&route.label) {
                bail!("{}: label `{}` is used by another route; a label names one kind of call (its crash point is after_{})", at("label"), r.label, r.label);
            }
            labels.push(route.label);
            routes.push(route);
        }
        for (j, r) in routes.iter().enumerate() {
            if let RouteKind::Lookup { of, .. } = &r.kind {
                for o in of {
                    let applies = routes.iter().any(|x| x.label == *o && matches!(x.kind, RouteKind::Apply { .. }));
                    if !applies {
                        let line = field_line(text, &p.routes[j].span(), "of");
                        bail!(
                            "{}:{line}: field `providers[{i}].routes[{j}].of` ({}: {}): `{o}` is not a route of {} with effect = \"apply\"",
                            path.display(),
                            p.name,
                            r.label,
                            p.name
                        );
                    }
                }
            }
        }
        let mut webhooks: Vec<Webhook> = Vec::new();
        for (j, h) in p.webhooks.iter().enumerate() {
            let span = h.span();
            let h = h.get_ref();
            let at = |f: &str| {
                format!(
                    "{}:{}: field `providers[{i}].webhooks[{j}].{f}` ({}: {})",
                    path.display(),
                    field_line(text, &span, f),
                    p.name,
                    h.label
                )
            };
            let hook = webhook(h, &routes, endpoints, &at)?;
            let answer = crashpoint::webhook_answer_label(hook.label);
            if labels.contains(&hook.label) || labels.contains(&answer.as_str()) {
                bail!(
                    "{}: label `{}` (or `{answer}`, its answer's) is used by another route or webhook; a label names one kind of call",
                    at("label"),
                    h.label
                );
            }
            if served.contains(&hook.role) {
                bail!(
                    "{}: role `{}` serves another webhook already; expected one webhook per endpoint role (declare another role with kind = \"endpoint\")",
                    at("role"),
                    h.role
                );
            }
            if raw.iter().any(|o| o.get_ref().url_env == hook.port_env) {
                bail!("{}: `{}` is a provider's url_env; expected a variable of its own", at("port_env"), h.port_env);
            }
            if crashpoint::RESERVED_ENV.contains(&hook.port_env.as_str()) || hook.port_env.starts_with("CRASHPOINT_") {
                bail!(
                    "{}: crashpoint sets `{}` itself for every worker; expected a variable of the webhook's own, e.g. \"CARDS_WEBHOOK_PORT\"",
                    at("port_env"),
                    h.port_env
                );
            }
            labels.push(hook.label);
            labels.push(leak(answer));
            served.push(hook.role);
            webhooks.push(hook);
        }
        out.push(ApiSpec {
            name: leak(p.name.clone()),
            about: leak(p.about.clone().unwrap_or_else(|| format!("provider {}", p.name))),
            url_env: p.url_env.clone(),
            routes,
            webhooks,
        });
    }
    Ok(out)
}

/// The line of key `field`'s first part (`idempotency` of `idempotency.window`) inside `span`
/// of `text`, or the span's first line when it is not written there (a default).
fn field_line(text: &str, span: &std::ops::Range<usize>, field: &str) -> usize {
    let key = field.split('.').next().unwrap_or(field);
    let body = text.get(span.clone()).unwrap_or("");
    let mut at = 0;
    for l in body.split_inclusive('\n') {
        let t = l.trim_start();
        if t.strip_prefix(key).is_some_and(|r| r.trim_start().starts_with('=')) {
            return line_of(text, span.start + at);
        }
        at += l.len();
    }
    line_of(text, span.start)
}

/// Whether `v` reads as an environment variable's name (`CARDS_API_BASE`).
fn env_name(v: &str) -> bool {
    v.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
        && v.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// One webhook, checked against its provider's `routes` and the file's `endpoints` roles.
fn webhook(
    h: &WebhookRaw,
    routes: &[Route],
    endpoints: &[&'static str],
    at: &dyn Fn(&str) -> String,
) -> Result<Webhook> {
    if h.label.is_empty()
        || !h.label.starts_with(|c: char| c.is_ascii_lowercase())
        || !h.label.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        bail!(
            "{}: expected a call label of lower-case letters, digits and `_`, e.g. \"payment_succeeded\"",
            at("label")
        );
    }
    let Some(on) = routes.iter().find(|r| r.label == h.on && matches!(r.kind, RouteKind::Apply { .. })) else {
        let applies: Vec<&str> =
            routes.iter().filter(|r| matches!(r.kind, RouteKind::Apply { .. })).map(|r| r.label).collect();
        bail!(
            "{}: expected the label of a route of this provider with effect = \"apply\" ({}), found `{}`",
            at("on"),
            applies.join(", "),
            h.on
        );
    };
    parse_path(&h.path).map_err(|e| anyhow!("{}: {e}", at("path")))?;
    if h.path.contains('{') {
        bail!("{}: the endpoint's path is the team's, with no `{{…}}` segment, e.g. \"/webhooks/cards\"", at("path"));
    }
    let Some(role) = endpoints.iter().copied().find(|r| *r == h.role) else {
        bail!(
            "{}: expected a role of this file with kind = \"endpoint\" ({}), found `{}`",
            at("role"),
            if endpoints.is_empty() {
                "there is none: declare one, e.g. [roles.w] kind = \"endpoint\" with its command".to_string()
            } else {
                endpoints.join(", ")
            },
            h.role
        );
    };
    if !env_name(&h.port_env) {
        bail!("{}: expected an environment variable name such as \"CARDS_WEBHOOK_PORT\" (upper case, digits, `_`), found `{}`", at("port_env"), h.port_env);
    }
    let body = serde_json::to_value(&h.body).map_err(|e| anyhow!("{}: {e}", at("body")))?;
    check_template(&body, TemplateUse::Webhook).map_err(|e| anyhow!("{}: {e}", at("body")))?;
    let attempts_max = match &h.retry {
        None => ATTEMPTS_DEFAULT,
        Some(RetryRaw { max: 0 }) => bail!("{}: expected at least 1 delivery, e.g. {{ max = 10 }}", at("retry.max")),
        Some(RetryRaw { max }) => *max,
    };
    Ok(Webhook {
        label: leak(h.label.clone()),
        on: on.label,
        path: h.path.clone(),
        role,
        port_env: h.port_env.clone(),
        body,
        attempts_max,
    })
}

/// One route, checked against the routes before it.
fn route(r: &RouteRaw, before: &[Route], at: &dyn Fn(&str) -> String) -> Result<Route> {
    if r.label.is_empty() || !r.label.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
        bail!("{}: expected a call label of lower-case letters, digits and `_`, e.g. \"charge\"", at("label"));
    }
    let method = r.method.to_ascii_uppercase();
    if !METHODS.contains(&method.as_str()) {
        bail!("{}: expected one of {}, found `{}`", at("method"), METHODS.join(", "), r.method);
    }
    let segments = parse_path(&r.path).map_err(|e| anyhow!("{}: {e}", at("path")))?;
    fn shape(p: &[Segment]) -> Vec<&str> {
        p.iter().map(|s| if let Segment::Lit(l) = s { l.as_str() } else { "{}" }).collect()
    }
    if before.iter().any(|b| b.method == method && shape(&b.path) == shape(&segments)) {
        bail!(
            "{}: another route already takes {method} {} (its `{{…}}` segments at the same places)",
            at("path"),
            r.path
        );
    }
    let has_param = |name: &str| segments.contains(&Segment::Param(name.to_string()));
    let answer = |a: &AnswerRaw, field: &str, place: TemplateUse| -> Result<Answer> {
        if !(100..=599).contains(&a.status) {
            bail!("{}: expected an HTTP status from 100 to 599, found {}", at(&format!("{field}.status")), a.status);
        }
        let body = match &a.body {
            None => serde_json::Value::Null,
            Some(v) => serde_json::to_value(v).map_err(|e| anyhow!("{}: {e}", at(&format!("{field}.body"))))?,
        };
        check_template(&body, place).map_err(|e| anyhow!("{}: {e}", at(&format!("{field}.body"))))?;
        Ok(Answer::new(a.status, body))
    };
    let not_here = |fields: &[(&str, bool)], effect: &str| -> Result<()> {
        match fields.iter().find(|(_, set)| *set) {
            Some((f, _)) => bail!("{}: a route with effect = \"{effect}\" takes no `{f}`", at(f)),
            None => Ok(()),
        }
    };
    let kind = match r.effect.as_str() {
        "apply" => {
            not_here(&[("match", r.by.is_some()), ("of", !r.of.is_empty()), ("found", r.found.is_some()), ("missing", r.missing.is_some())], "apply")?;
            let Some(response) = &r.response else {
                bail!("{}: expected the answer of an applied request, e.g. {{ status = 200, body = {{ id = \"{{{{new ch_}}}}\" }} }}", at("response"));
            };
            let idempotency = match &r.idempotency {
                None => None,
                Some(i) => {
                    let key = match (&i.header, &i.path) {
                        (Some(h), None) if !h.is_empty() => KeyFrom::Header(h.to_ascii_lowercase()),
                        (None, Some(p)) if has_param(p) => KeyFrom::Path(p.clone()),
                        (None, Some(p)) => bail!("{}: `{p}` is not a `{{…}}` segment of the path `{}`", at("idempotency.path"), r.path),
                        _ => bail!(
                            "{}: expected `header = \"Idempotency-Key\"` (the key is a request header) or `path = \"id\"` (the key is the path's `{{id}}`), one of the two",
                            at("idempotency")
                        ),
                    };
                    let window_ms = match &i.window {
                        None => None,
                        Some(w) => match crashpoint::parse_duration_ms(w).map_err(|e| anyhow!("{}: {e}; expected e.g. \"24h\"", at("idempotency.window")))? {
                            0 => bail!("{}: a window of 0 deduplicates nothing; expected e.g. \"24h\", or no `window` (keys kept forever)", at("idempotency.window")),
                            ms => Some(ms),
                        },
                    };
                    let other_params = i.other_params.as_ref().map(|a| answer(a, "idempotency.other_params", TemplateUse::Found)).transpose()?;
                    Some(Idempotency { key, window_ms, other_params })
                }
            };
            RouteKind::Apply {
                idempotency,
                response: answer(response, "response", TemplateUse::Response)?,
                replay: r.replay.as_ref().map(|a| answer(a, "replay", TemplateUse::Found)).transpose()?,
            }
        }
        "lookup" => {
            not_here(&[("idempotency", r.idempotency.is_some()), ("response", r.response.is_some()), ("replay", r.replay.is_some())], "lookup")?;
            let by = match &r.by {
                None => bail!(
                    "{}: expected what the lookup compares: {{ query = \"operation_id\", field = \"operation_id\" }} (a query parameter with a field of the applied requests' bodies) or {{ path = \"id\" }} (a path segment with an effect's reference)",
                    at("match")
                ),
                Some(m) => match (&m.query, &m.path) {
                    (Some(q), None) => {
                        let Some(field) = m.field.clone().filter(|f| !f.is_empty()) else {
                            bail!("{}: expected the field of the applied requests' bodies the parameter is compared with, e.g. \"metadata.order_id\"", at("match.field"));
                        };
                        if m.pattern.as_ref().is_some_and(|p| p.matches("{}").count() != 1) {
                            bail!("{}: expected a pattern with one `{{}}`, the part compared, e.g. \"metadata['order_id']:'{{}}'\"", at("match.pattern"));
                        }
                        if m.on.is_some() {
                            bail!("{}: `on` goes with `path`", at("match.on"));
                        }
                        Match::Query { param: q.clone(), pattern: m.pattern.clone(), field }
                    }
                    (None, Some(p)) if has_param(p) => {
                        if m.pattern.is_some() || m.field.is_some() {
                            bail!("{}: `pattern` and `field` go with `query`", at("match"));
                        }
                        let key = match m.on.as_deref() {
                            None | Some("reference") => false,
                            Some("key") => true,
                            Some(o) => bail!("{}: expected \"reference\" (the effect's id, the default) or \"key\" (its idempotency key), found `{o}`", at("match.on")),
                        };
                        Match::Path { param: p.clone(), key }
                    }
                    (None, Some(p)) => bail!("{}: `{p}` is not a `{{…}}` segment of the path `{}`", at("match.path"), r.path),
                    _ => bail!("{}: expected `query = …` or `path = …`, one of the two", at("match")),
                },
            };
            let missing = match &r.missing {
                Some(a) => answer(a, "missing", TemplateUse::Missing)?,
                None => Answer::new(404, serde_json::json!({"error": {"type": "invalid_request_error", "message": "No such object"}})),
            };
            RouteKind::Lookup {
                by,
                of: r.of.iter().map(|o| leak(o.clone())).collect(),
                found: r.found.as_ref().map(|a| answer(a, "found", TemplateUse::Found)).transpose()?,
                missing,
            }
        }
        other => bail!("{}: expected \"apply\" (each request applies an effect) or \"lookup\" (answers from what was applied), found `{other}`", at("effect")),
    };
    Ok(Route { label: leak(r.label.clone()), method, path: segments, kind })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct File {
        providers: Vec<Spanned<ProviderRaw>>,
    }

    fn read_text(text: &str) -> Result<Vec<ApiSpec>> {
        let f: File = toml::from_str(text).map_err(|e| anyhow!("{e}"))?;
        read(Path::new("w.workload.toml"), text, &f.providers, &["p", "c", "w"], &["w"])
    }

    const GOOD: &str = r#"
[[providers]]
name = "cards"
url_env = "CARDS_API_BASE"

[[providers.routes]]
label = "charge"
method = "POST"
path = "/v1/charges"
effect = "apply"
idempotency = { header = "Idempotency-Key", window = "24h", other_params = { status = 400 } }
response = { status = 200, body = { id = "{{new ch_}}", amount = "{{req.amount}}" } }

[[providers.routes]]
label = "charge_get"
method = "GET"
path = "/v1/charges/{id}"
effect = "lookup"
match = { path = "id" }

[[providers.webhooks]]
label = "paid"
on = "charge"
role = "w"
port_env = "CARDS_WEBHOOK_PORT"
path = "/webhooks/cards"
body = { id = "{{new evt_}}", data = { object = "{{effect}}" } }
retry = { max = 4 }
"#;

    #[test]
    fn a_provider_reads_into_the_engine_model() {
        let specs = read_text(GOOD).unwrap();
        assert_eq!(specs.len(), 1);
        assert_eq!((specs[0].name, specs[0].url_env.as_str(), specs[0].routes.len()), ("cards", "CARDS_API_BASE", 2));
        let hook = &specs[0].webhooks[0];
        assert_eq!(
            (hook.label, hook.on, hook.role, hook.port_env.as_str(), hook.attempts_max),
            ("paid", "charge", "w", "CARDS_WEBHOOK_PORT", 4)
        );
        match &specs[0].routes[0].kind {
            RouteKind::Apply { idempotency: Some(i), .. } => {
                assert_eq!((i.key.clone(), i.window_ms), (KeyFrom::Header("idempotency-key".into()), Some(86_400_000)))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn mistakes_name_the_line_and_the_field() {
        let cases = [
            ("path = \"/v1/charges/{id}\"", "path = \"v1/charges\"", "w.workload.toml:17: field `providers[0].routes[1].path` (cards: charge_get): expected a path starting with `/`"),
            ("window = \"24h\"", "window = \"a day\"", "w.workload.toml:11: field `providers[0].routes[0].idempotency.window` (cards: charge)"),
            ("effect = \"lookup\"", "effect = \"read\"", "field `providers[0].routes[1].effect` (cards: charge_get): expected \"apply\""),
            ("match = { path = \"id\" }", "match = { path = \"ref\" }", "field `providers[0].routes[1].match.path` (cards: charge_get): `ref` is not a `{…}` segment"),
            ("\"{{req.amount}}\"", "\"{{effect.id}}\"", "field `providers[0].routes[0].response.body` (cards: charge): placeholder `{{effect.id}}` cannot stand here"),
            ("name = \"cards\"", "name = \"Cards\"", "w.workload.toml:3: field `providers[0].name` (Cards): expected a provider name"),
            ("url_env = \"CARDS_API_BASE\"", "url_env = \"cards-url\"", "field `providers[0].url_env` (cards)"),
            ("label = \"charge_get\"", "label = \"charge\"", "label `charge` is used by another route"),
            ("window = \"24h\"", "window = \"0s\"", "a window of 0 deduplicates nothing"),
            ("name = \"cards\"", "name = \"c\"", "field `providers[0].name` (c): `c` is a role of this file"),
            ("on = \"charge\"", "on = \"charge_get\"", "w.workload.toml:23: field `providers[0].webhooks[0].on` (cards: paid): expected the label of a route of this provider with effect = \"apply\" (charge)"),
            ("role = \"w\"", "role = \"c\"", "field `providers[0].webhooks[0].role` (cards: paid): expected a role of this file with kind = \"endpoint\" (w), found `c`"),
            ("port_env = \"CARDS_WEBHOOK_PORT\"", "port_env = \"CARDS_API_BASE\"", "`CARDS_API_BASE` is a provider's url_env"),
            ("path = \"/webhooks/cards\"", "path = \"/webhooks/{id}\"", "field `providers[0].webhooks[0].path` (cards: paid): the endpoint's path is the team's"),
            ("\"{{effect}}\" }", "\"{{query.x}}\" }", "field `providers[0].webhooks[0].body` (cards: paid): placeholder `{{query.x}}` cannot stand here"),
            ("port_env = \"CARDS_WEBHOOK_PORT\"", "port_env = \"DATABASE_URL\"", "crashpoint sets `DATABASE_URL` itself for every worker"),
            ("retry = { max = 4 }", "retry = { max = 0 }", "field `providers[0].webhooks[0].retry.max` (cards: paid): expected at least 1 delivery"),
            ("label = \"paid\"", "label = \"charge\"", "label `charge` (or `charge_answer`, its answer's) is used by another route or webhook"),
        ];
        for (from, to, want) in cases {
            let e = read_text(&GOOD.replace(from, to)).unwrap_err().to_string();
            assert!(e.contains(want), "{to}: {e}");
        }
    }
}
