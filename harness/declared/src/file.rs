//! Reading one workload file: its TOML checked field by field, every mistake named by file,
//! line and field, with what was expected.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use serde::Deserialize;
use toml::Spanned;

use crashpoint::files::{line_of, line_of_field, toml_error, utf8};
use crashpoint::InvariantSpec;
use crashpoint::SqlInvariant;
use crashpoint::DEFAULT_RETENTION_S;
use crashpoint::{External, ExternalRaw, ExternalVariant as Variant};
use crashpoint::{Leftover, QueueSpec, RoleKind, RoleSpec};

use crate::template::Template;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    name: Spanned<String>,
    about: String,
    #[serde(default)]
    schema: Vec<String>,
    #[serde(default)]
    queues: Vec<Spanned<QueueRaw>>,
    events: EventsRaw,
    roles: BTreeMap<String, toml::Table>,
    #[serde(default)]
    pending: Vec<PendingRaw>,
    #[serde(default)]
    invariants: Vec<Spanned<InvariantSpec>>,
    #[serde(default)]
    systems: BTreeMap<String, SystemRaw>,
    #[serde(default)]
    catalogue: Option<String>,
    #[serde(default)]
    providers: Vec<Spanned<crate::providers::ProviderRaw>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueRaw {
    name: String,
    #[serde(default = "default_label")]
    label: String,
    #[serde(default = "default_visibility")]
    visibility_timeout_s: u64,
    #[serde(default)]
    retention_s: Option<u64>,
    #[serde(default)]
    fifo: bool,
    #[serde(default)]
    dead_letter: Option<DeadLetterRaw>,
    #[serde(default)]
    outbound: bool,
}

fn default_label() -> String {
    "m".into()
}

fn default_visibility() -> u64 {
    30
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeadLetterRaw {
    queue: String,
    max_receive_count: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsRaw {
    #[serde(default)]
    queue: Option<String>,
    #[serde(default)]
    insert: Option<String>,
    identity: String,
    body: toml::Table,
    #[serde(default)]
    defaults: toml::Table,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PendingRaw {
    what: String,
    count_sql: String,
    #[serde(default)]
    due_sql: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SystemRaw {
    #[serde(default)]
    about: Option<String>,
    #[serde(default)]
    must_pass: bool,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    schema: Option<Vec<String>>,
}

/// Where a declared workload's events go: an SQS queue (the built-in producer sends each
/// body), or a table (it runs the file's `INSERT`).
#[derive(Debug, Clone)]
pub enum Dispatch {
    /// SendMessage of the body to this queue.
    Queue(&'static str),
    /// This statement, with `$1` the body (`jsonb`) and `$2` the identity (`uuid`).
    Insert(&'static str),
}

/// One system of the file: `reference` or a variant.
#[derive(Debug, Clone)]
pub struct SystemDecl {
    /// Its name.
    pub name: &'static str,
    /// One line saying what it is.
    pub about: &'static str,
    /// Whether the catalogue must find it correct (`must_pass = true`, a harmless variant; the
    /// reference always), instead of catching it.
    pub must_pass: bool,
    /// Its whole DDL: its schema files in order.
    pub schema_sql: String,
}

/// A workload file, read and checked.
#[derive(Debug, Clone)]
pub struct Decl {
    pub name: &'static str,
    pub about: &'static str,
    pub queues: Vec<QueueSpec>,
    pub roles: Vec<RoleSpec>,
    pub external: Vec<Arc<External>>,
    pub producer: Option<&'static str>,
    pub dispatch: Dispatch,
    pub identity: String,
    pub template: Template,
    pub leftovers: Vec<Leftover>,
    pub invariants: Vec<SqlInvariant>,
    pub systems: Vec<SystemDecl>,
    pub catalogue: Option<String>,
    /// Its `[[providers]]` ([`crate::providers`]).
    pub providers: Vec<crashpoint::http_api::ApiSpec>,
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn word(s: &str, dash: bool) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || (dash && c == '-'))
}

/// Keys of a role table that are the workload's, not the external worker's.
const ROLE_KEYS: &[&str] = &["about", "points", "builtin", "handles", "kind"];

/// Reads workload file `path`; `root` is the directory that holds `scenarios/` (paths in the
/// file are relative to it, and the workers run there).
pub fn read(path: &Path, root: &Path) -> Result<Decl> {
    let bytes = std::fs::read(path).map_err(|e| anyhow!("reading {}: {e}", path.display()))?;
    let text = utf8(path, bytes)?;
    let raw: Raw = toml::from_str(&text).map_err(|e| toml_error(path, &text, &e))?;
    let at = |field: &str| format!("{}:{}: field `{field}`", path.display(), line_of_field(&text, field));
    let name = raw.name.get_ref().clone();
    if !word(&name, true) || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        bail!(
            "{}:{}: field `name`: expected a workload name of lower-case letters, digits, `-` and `_` (it names the scenario directory), found `{name}`",
            path.display(),
            line_of(&text, raw.name.span().start)
        );
    }
    // Queues.
    let mut queues = Vec::new();
    for (i, q) in raw.queues.iter().enumerate() {
        let line = line_of(&text, q.span().start);
        let q = q.get_ref();
        let here = |f: &str| format!("{}:{line}: field `queues[{i}].{f}` ({})", path.display(), q.name);
        if !word(&q.name, true) {
            bail!("{}: expected a queue name of lower-case letters, digits, `-` and `_`", here("name"));
        }
        if queues.iter().any(|x: &QueueSpec| x.name == q.name) {
            bail!("{}: queue `{}` is declared twice", here("name"), q.name);
        }
        if q.label.is_empty() || !q.label.chars().all(|c| c.is_ascii_lowercase()) {
            bail!("{}: expected a message label prefix of lower-case letters, e.g. \"m\"", here("label"));
        }
        if !(1..=43_200).contains(&q.visibility_timeout_s) {
            bail!(
                "{}: expected 1 to 43200 s (SQS's range, 12 h), found {}",
                here("visibility_timeout_s"),
                q.visibility_timeout_s
            );
        }
        let retention = q.retention_s.unwrap_or(DEFAULT_RETENTION_S);
        if !(60..=1_209_600).contains(&retention) {
            bail!(
                "{}: expected 60 to 1209600 s (SQS's MessageRetentionPeriod, 14 days), found {retention}",
                here("retention_s")
            );
        }
        let mut spec = QueueSpec::new(leak(q.name.clone()), leak(q.label.clone()))
            .visibility_timeout_s(q.visibility_timeout_s)
            .retention_s(retention);
        if q.fifo {
            spec = spec.fifo();
        }
        if q.outbound {
            if q.dead_letter.is_some() {
                bail!("{}: an outbound queue is consumed elsewhere: its redrive policy is the consumer's; expected no `dead_letter`", here("dead_letter"));
            }
            spec = spec.outbound();
        }
        if let Some(dl) = &q.dead_letter {
            if !(1..=1000).contains(&dl.max_receive_count) {
                bail!(
                    "{}: expected 1 to 1000 (SQS's maxReceiveCount), found {}",
                    here("dead_letter.max_receive_count"),
                    dl.max_receive_count
                );
            }
            spec = spec.dead_letter(leak(dl.queue.clone()), dl.max_receive_count);
        }
        queues.push(spec);
    }
    for (i, q) in raw.queues.iter().enumerate() {
        if let Some(dl) = &q.get_ref().dead_letter {
            if dl.queue == q.get_ref().name || !queues.iter().any(|x| x.name == dl.queue) {
                bail!(
                    "{}:{}: field `queues[{i}].dead_letter.queue`: expected another queue of this file, found `{}`; declare the dead-letter queue as a [[queues]] table too",
                    path.display(),
                    line_of(&text, q.span().start),
                    dl.queue
                );
            }
        }
    }
    let queue_names = || {
        if queues.is_empty() {
            "none: the file declares no [[queues]]".to_string()
        } else {
            queues.iter().map(|q| q.name).collect::<Vec<_>>().join(", ")
        }
    };
    // Events.
    let template = Template::new(raw.events.body.clone(), raw.events.defaults.clone())
        .map_err(|e| anyhow!("{}: {e}", at("events.body")))?;
    let dispatch = match (&raw.events.queue, &raw.events.insert) {
        (Some(q), None) if queues.iter().any(|x| x.name == q && x.outbound) => {
            bail!("{}: `{q}` is an outbound queue (`outbound = true`): no role of this file handles it; expected the queue the team's worker receives from", at("events.queue"))
        }
        (Some(q), None) => match queues.iter().find(|x| x.name == q) {
            Some(x) => Dispatch::Queue(x.name),
            None => bail!("{}: expected one of the file's queues ({}), found `{q}`", at("events.queue"), queue_names()),
        },
        (None, Some(sql)) if !sql.trim().is_empty() => Dispatch::Insert(leak(sql.clone())),
        (Some(_), Some(_)) => bail!("{}: expected either `queue` (SQS) or `insert` (a table queue), not both", at("events")),
        _ => bail!(
            "{}: expected `queue = \"<queue>\"` (the producer sends each body to it) or `insert = \"INSERT …\"` (it runs this with $1 the body as jsonb and $2 the identity as uuid)",
            at("events")
        ),
    };
    let (sample, sample_id) = template.sample().map_err(|e| anyhow!("{}: {e}", at("events.body")))?;
    if !raw.events.identity.starts_with('/') {
        bail!(
            "{}: expected a JSON pointer into the body, such as \"/eventId\", found `{}`",
            at("events.identity"),
            raw.events.identity
        );
    }
    match sample.pointer(&raw.events.identity) {
        None => bail!("{}: the JSON pointer `{}` finds nothing in the body {sample}", at("events.identity"), raw.events.identity),
        Some(v) if v.as_str() != Some(sample_id.to_string().as_str()) => bail!(
            "{}: the JSON pointer `{}` finds {v}, not the event's identity; write \"{{{{id}}}}\" at that place of the body",
            at("events.identity"),
            raw.events.identity
        ),
        Some(_) => {}
    }
    // Roles, first as the engine sees them.
    let mut roles = Vec::new();
    let mut producer = None;
    for (prefix, t) in &raw.roles {
        let here = |f: &str| at(&format!("roles.{prefix}.{f}"));
        if prefix.is_empty() || !prefix.chars().all(|c| c.is_ascii_lowercase()) {
            bail!(
                "{}: expected a role prefix of lower-case letters (its workers are `{prefix}1`, `{prefix}2`, …)",
                at(&format!("roles.{prefix}"))
            );
        }
        let text_of = |k: &str| -> Result<Option<String>> {
            match t.get(k) {
                None => Ok(None),
                Some(toml::Value::String(s)) => Ok(Some(s.clone())),
                Some(v) => bail!("{}: expected a string, found {v}", here(k)),
            }
        };
        let points: Vec<String> = match t.get("points") {
            None => Vec::new(),
            Some(v) => v.clone().try_into().map_err(|_| {
                anyhow!(
                    "{}: expected a list of crash points such as [\"after_claim\", \"after_commit\"]",
                    here("points")
                )
            })?,
        };
        for p in &points {
            if !p.strip_prefix("after_").is_some_and(|l| word(l, false)) {
                bail!("{}: `{p}` is not a crash point; expected `after_<call label>`, e.g. \"after_commit\" (the worker stands there once that call has answered)", here("points"));
            }
        }
        let builtin = text_of("builtin")?;
        let kind = match (builtin.as_deref(), text_of("handles")?, text_of("kind")?.as_deref()) {
            (Some("producer"), None, None | Some("producer")) => {
                if let Some(k) = t.keys().find(|k| !ROLE_KEYS.contains(&k.as_str())) {
                    bail!("{}: the built-in producer takes no `{k}`; expected only `about` and `points`", here(k));
                }
                if producer.replace(leak(prefix.clone())).is_some() {
                    bail!("{}: a second built-in producer; expected one producer role", here("builtin"));
                }
                RoleKind::Producer
            }
            (Some(other), _, _) => bail!("{}: expected \"producer\" (the one built-in role), found `{other}`", here("builtin")),
            (None, Some(q), None | Some("handler")) => match queues.iter().find(|x| x.name == q) {
                Some(x) if x.outbound => bail!(
                    "{}: `{q}` is declared `outbound = true` (another service consumes it); remove `outbound` to have this role handle it",
                    here("handles")
                ),
                Some(x) => RoleKind::Handler { queue: x.name },
                None => bail!("{}: expected one of the file's queues ({}), found `{q}`", here("handles"), queue_names()),
            },
            (None, None, Some("poller")) => RoleKind::Poller,
            (None, None, Some("periodic")) => RoleKind::Periodic,
            (None, None, Some("endpoint")) => RoleKind::Endpoint,
            (None, None, Some("producer")) => bail!(
                "{}: a producer played by the team's own process is not supported yet; use `builtin = \"producer\"`",
                here("kind")
            ),
            (None, _, _) => bail!(
                "{}: expected `handles = \"<queue>\"` (a handler of that queue), `kind = \"poller\"` (polls PostgreSQL, e.g. a table queue or an outbox relay), `kind = \"periodic\"` or `kind = \"endpoint\"` (serves a provider's webhooks)",
                at(&format!("roles.{prefix}"))
            ),
        };
        let points = match kind {
            RoleKind::Producer if points.is_empty() || points == ["after_send"] => vec!["after_send"],
            RoleKind::Producer => bail!("{}: the built-in producer stands at `after_send` only", here("points")),
            _ => points.into_iter().map(leak).collect(),
        };
        let about = text_of("about")?.unwrap_or_else(|| format!("role {prefix}"));
        roles.push(RoleSpec {
            prefix: leak(prefix.clone()),
            kind,
            points: Box::leak(points.into_boxed_slice()),
            about: leak(about),
        });
    }
    if roles.iter().all(|r| r.kind == RoleKind::Producer) {
        bail!(
            "{}: expected at least one role besides the producer: the team's worker, with its `command`",
            at("roles")
        );
    }
    if producer.is_none() {
        bail!("{}: expected a role with `builtin = \"producer\"`, which dispatches the scenario's events", at("roles"));
    }
    // Systems.
    let mut systems = Vec::new();
    let mut names: Vec<&String> = raw.systems.keys().collect();
    names.sort_by_key(|n| (n.as_str() != "reference", n.as_str()));
    let reference_default =
        SystemRaw { about: None, must_pass: false, args: Vec::new(), env: BTreeMap::new(), schema: None };
    if !raw.systems.contains_key("reference") {
        systems.push(system(path, &text, root, "reference", &reference_default, &raw.schema)?);
    }
    for n in names {
        if !word(n, true) {
            bail!("{}: expected a system name of lower-case letters, digits, `-` and `_`", at(&format!("systems.{n}")));
        }
        systems.push(system(path, &text, root, n, &raw.systems[n], &raw.schema)?);
    }
    let variants: BTreeMap<String, Variant> =
        raw.systems.iter().map(|(n, s)| (n.clone(), Variant { args: s.args.clone(), env: s.env.clone() })).collect();
    // The team's processes.
    let mut external = Vec::new();
    for (prefix, t) in &raw.roles {
        if producer == Some(prefix.as_str()) {
            continue;
        }
        let mut rest = t.clone();
        rest.retain(|k: &str, _| !ROLE_KEYS.contains(&k));
        if !rest.contains_key("command") {
            bail!(
                "{}: expected the worker's command line, e.g. [\"node\", \"worker.js\"]: a role other than the built-in producer is the team's own process",
                at(&format!("roles.{prefix}"))
            );
        }
        let raw_ext: ExternalRaw = toml::Value::Table(rest).try_into().map_err(|e: toml::de::Error| {
            let m = e.message();
            let named = ["unknown field `", "missing field `"]
                .iter()
                .find_map(|p| m.strip_prefix(p))
                .and_then(|r| r.split('`').next());
            let field = match named {
                Some(f) => format!("roles.{prefix}.{f}"),
                None => format!("roles.{prefix}"),
            };
            anyhow!("{}: {m}", at(&field))
        })?;
        let mut ext = External::resolve(prefix, raw_ext, &roles, root)
            .map_err(|e| anyhow!("{}: [roles.{prefix}]: {e}", at(&format!("roles.{prefix}"))))?;
        ext.systems = systems.iter().filter(|s| s.name != "reference").map(|s| s.name.to_string()).collect();
        ext.variants = variants.clone();
        ext.origin = Some(format!("{}: [roles.{prefix}]", path.display()));
        external.push(Arc::new(ext));
    }
    // Pending work.
    let mut leftovers = Vec::new();
    for (i, p) in raw.pending.iter().enumerate() {
        if p.count_sql.trim().is_empty() {
            bail!(
                "{}: expected `SELECT count(*) …` returning one bigint",
                at(&format!("pending[{i}].count_sql")).replace(&format!("pending[{i}]"), "pending")
            );
        }
        leftovers.push(Leftover {
            what: leak(p.what.clone()),
            count_sql: leak(p.count_sql.clone()),
            due_sql: p.due_sql.clone().map(leak),
        });
    }
    let invariants = InvariantSpec::resolve_all(path, &text, &raw.invariants)?;
    let prefixes: Vec<&str> = roles.iter().map(|r| r.prefix).collect();
    let endpoints: Vec<&'static str> =
        roles.iter().filter(|r| r.kind == RoleKind::Endpoint).map(|r| r.prefix).collect();
    let providers = crate::providers::read(path, &text, &raw.providers, &prefixes, &endpoints)?;
    for r in roles.iter().filter(|r| r.kind == RoleKind::Endpoint) {
        if !providers.iter().flat_map(|p| &p.webhooks).any(|w| w.role == r.prefix) {
            bail!(
                "{}: role `{}` is an endpoint, but no [[providers.webhooks]] names it (`role = \"{}\"`); expected a webhook it serves",
                at(&format!("roles.{}", r.prefix)),
                r.prefix,
                r.prefix
            );
        }
    }
    Ok(Decl {
        name: leak(name),
        about: leak(raw.about),
        queues,
        roles,
        external,
        producer,
        dispatch,
        identity: raw.events.identity,
        template,
        leftovers,
        invariants,
        systems,
        catalogue: raw.catalogue,
        providers,
    })
}

/// System `name` of the file, its schema files read now (relative to `root`).
fn system(
    path: &Path,
    text: &str,
    root: &Path,
    name: &str,
    raw: &SystemRaw,
    default_schema: &[String],
) -> Result<SystemDecl> {
    let field = if raw.schema.is_some() { format!("systems.{name}.schema") } else { "schema".to_string() };
    let files = raw.schema.as_deref().unwrap_or(default_schema);
    let mut sql = String::new();
    for f in files {
        let p = root.join(f);
        let body = std::fs::read_to_string(&p).map_err(|e| {
            anyhow!(
                "{}:{}: field `{field}`: cannot read `{f}` ({}): {e}; paths are relative to {}",
                path.display(),
                line_of_field(text, &field),
                p.display(),
                root.display()
            )
        })?;
        sql.push_str(&format!("-- {f}\n{body}\n"));
    }
    let about = raw.about.clone().unwrap_or_else(|| {
        if name == "reference" {
            "the team's reference".into()
        } else {
            format!("variant {name}")
        }
    });
    Ok(SystemDecl {
        name: leak(name.to_string()),
        about: leak(about),
        must_pass: name == "reference" || raw.must_pass,
        schema_sql: sql,
    })
}
