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
//! ```

use std::path::Path;

use anyhow::{anyhow, bail, Result};
use serde::Deserialize;
use toml::Spanned;

use crashpoint::files::line_of;
use crashpoint::http_api::{
    check_template, parse_path, Answer, ApiSpec, Idempotency, KeyFrom, Match, Route, RouteKind, Segment, TemplateUse,
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
}

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
/// simulation's host names), environment variables, routes, templates.
pub fn read(path: &Path, text: &str, raw: &[Spanned<ProviderRaw>], roles: &[&str]) -> Result<Vec<ApiSpec>> {
    let mut out: Vec<ApiSpec> = Vec::new();
    let mut labels: Vec<&str> = Vec::new();
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
        let env_ok = p.url_env.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
            && p.url_env.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if !env_ok {
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
        out.push(ApiSpec {
            name: leak(p.name.clone()),
            about: leak(p.about.clone().unwrap_or_else(|| format!("provider {}", p.name))),
            url_env: p.url_env.clone(),
            routes,
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
        read(Path::new("w.workload.toml"), text, &f.providers, &["p", "c"])
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
"#;

    #[test]
    fn a_provider_reads_into_the_engine_model() {
        let specs = read_text(GOOD).unwrap();
        assert_eq!(specs.len(), 1);
        assert_eq!((specs[0].name, specs[0].url_env.as_str(), specs[0].routes.len()), ("cards", "CARDS_API_BASE", 2));
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
        ];
        for (from, to, want) in cases {
            let e = read_text(&GOOD.replace(from, to)).unwrap_err().to_string();
            assert!(e.contains(want), "{to}: {e}");
        }
    }
}
