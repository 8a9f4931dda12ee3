use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;

use std::sync::Arc;

use crate::schedule::{self, Schedule, Vocabulary};
use crate::workload::{role_of, Registry, Workload};

/// Bounds for generated schedules (`[explore]` in a scenario file).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExploreSpec {
    /// Most decisions per generated schedule (default 24).
    #[serde(default = "default_decisions_max")]
    pub decisions_max: usize,
    /// Put the AWS-only SQS faults (`sqs:stale-delete-noop`, `sqs:redeliver-after-delete`,
    /// `sqs:receive-lost`) on the menu (default false).
    #[serde(default)]
    pub sqs_faults: bool,
    /// Calls whose applied-then-unanswered crash is on the menu (`crash@<call>:applied`,
    /// e.g. `["commit"]`; default none). For external workers: the call reaches PostgreSQL and
    /// takes effect, and the worker is killed before the reply reaches it.
    #[serde(default)]
    pub applied: Vec<String>,
}

/// Exhaustive enumeration (`[exhaustive]` in a scenario file): after the scripted `schedule`
/// (the prefix that hands each worker its message), every interleaving of the listed workers'
/// calls, with and without one crash at each crash point.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExhaustiveSpec {
    /// The workers whose calls are interleaved, e.g. `"c1 c2"`.
    pub workers: String,
    /// Also enumerate one crash at each crash point (default true).
    #[serde(default = "yes")]
    pub crash: bool,
}

fn yes() -> bool {
    true
}

fn default_decisions_max() -> usize {
    24
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    workload: Option<String>,
    description: String,
    workers: String,
    #[serde(default)]
    schedule: Option<toml::Spanned<String>>,
    #[serde(default)]
    explore: Option<ExploreSpec>,
    #[serde(default)]
    exhaustive: Option<ExhaustiveSpec>,
    #[serde(default)]
    expect_trace: Vec<String>,
    #[serde(default)]
    config: toml::Table,
    #[serde(default)]
    events: Vec<toml::Table>,
    #[serde(default)]
    invariants: Vec<InvariantSpec>,
    #[serde(default)]
    external: std::collections::BTreeMap<String, crate::sim::wire::ExternalRaw>,
}

/// An `[[invariants]]` table: an SQL invariant of the scenario's own, checked after the
/// workload's (see [`crate::checker::SqlInvariant`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvariantSpec {
    /// Its name, e.g. `at most one payout per payment`.
    pub name: String,
    /// A query over the schedule's schema that returns the violating rows.
    pub sql: String,
    /// `excess` (default: a violating row is too much of an effect) or `missing`.
    #[serde(default)]
    pub kind: Option<String>,
}

/// A loaded scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// `<group>/<name>`, from its path under `scenarios/`.
    pub name: String,
    /// The workload it runs: `workload = "…"` in the file, else the one named like its group
    /// (the first directory under `scenarios/`), else the registry's default.
    pub workload: Arc<dyn Workload>,
    /// The file it came from.
    pub path: PathBuf,
    /// One line saying what it shows.
    pub description: String,
    /// Worker names.
    pub workers: Vec<String>,
    /// The scripted schedule (empty for an exploration scenario).
    pub schedule: Schedule,
    /// Present for an exploration scenario: schedules are generated within these bounds, and
    /// decisions that cannot apply are skipped rather than fatal.
    pub explore: Option<ExploreSpec>,
    /// Present for an exhaustive scenario (run with `crashpoint run --exhaustive`).
    pub exhaustive: Option<ExhaustiveSpec>,
    /// Substrings the trace must contain.
    pub expect_trace: Vec<String>,
    /// The workload's handler policy from `[config]` (without `visibility_timeout_s`).
    pub config: toml::Table,
    /// `[config] visibility_timeout_s`: overrides every queue's visibility timeout, logical s.
    pub visibility_timeout_s: Option<u64>,
    /// The `[[events]]` tables, in dispatch order, as the workload reads them.
    pub events: Vec<toml::Table>,
    /// The event labels (`name` of each `[[events]]` table).
    pub event_names: Vec<String>,
    /// The scenario's own SQL invariants (`[[invariants]]`), checked after the workload's.
    pub sql_invariants: Vec<crate::checker::SqlInvariant>,
    /// Roles played by external worker processes (`[external.<role>]`, see [`crate::sim::wire`]).
    pub external: Vec<Arc<crate::sim::wire::External>>,
}

impl Scenario {
    /// Every invariant a schedule of this scenario is checked against, in order: the
    /// workload's, the scenario's `[[invariants]]`, and quiescence when the workload has none.
    pub fn invariants(&self) -> Vec<Box<dyn crate::checker::Invariant>> {
        let mut all = self.workload.invariants();
        all.extend(self.sql_invariants.iter().cloned().map(|i| Box::new(i) as Box<dyn crate::checker::Invariant>));
        crate::checker::with_quiescence(all)
    }
}

/// The scenarios directory: `$CRASHPOINT_SCENARIOS`, else `./scenarios` if it exists, else
/// the crashpoint checkout's `scenarios/` (next to the engine crate).
pub fn scenarios_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CRASHPOINT_SCENARIOS") {
        return PathBuf::from(d);
    }
    let local = PathBuf::from("scenarios");
    if local.is_dir() {
        return local;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}

/// Every scenario under `dir`, sorted by name, each for its workload in `registry`.
/// Errors: a file that does not load.
pub fn discover(dir: &Path, registry: &Registry) -> Result<Vec<Scenario>> {
    let mut files = Vec::new();
    collect(dir, &mut files).with_context(|| format!("reading scenarios from {}", dir.display()))?;
    files.sort();
    let mut out = Vec::new();
    for f in &files {
        if let Some(s) = load(dir, f, registry)? {
            out.push(s);
        }
    }
    Ok(out)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            collect(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "toml") {
            out.push(p);
        }
    }
    Ok(())
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Loads `path` (a file under `root`) for the workload it names (see [`Scenario::workload`]).
/// Errors name the file, line and field, and say what was expected. (`Ok(None)` is reserved
/// for files to skip; none is skipped today.)
pub fn load(root: &Path, path: &Path, registry: &Registry) -> Result<Option<Scenario>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut raw: Raw = toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let name = path
        .strip_prefix(root)
        .unwrap_or(path)
        .with_extension("")
        .to_string_lossy()
        .replace('\\', "/");
    let group = name.split('/').next().unwrap_or_default();
    let workload = match &raw.workload {
        Some(w) => registry.get(w).ok_or_else(|| {
            anyhow!(
                "{}:{}: field `workload`: unknown workload `{w}`; expected one of {}",
                path.display(),
                field_line(&text, "workload"),
                registry.names().join(", ")
            )
        })?,
        None => match registry.get(group) {
            Some(w) => w,
            None => registry
                .default_workload()
                .ok_or_else(|| anyhow!("{}: no workload is registered", path.display()))?,
        },
    };
    let vocabulary = Vocabulary::of(workload.as_ref());
    let schedule = match &raw.schedule {
        Some(spanned) => parse_schedule(&text, path, spanned, &vocabulary)?,
        None if raw.explore.is_some() => Schedule::default(),
        None => bail!(
            "{}: field `schedule`: expected a schedule (or an [explore] table for generated schedules)",
            path.display()
        ),
    };
    let workers: Vec<String> = raw.workers.split_whitespace().map(str::to_string).collect();
    for w in &workers {
        if role_of(&vocabulary.roles, w).is_none() {
            let prefixes: Vec<String> = vocabulary.roles.iter().map(|r| format!("{} ({})", r.prefix, r.about)).collect();
            bail!(
                "{}:{}: field `workers`: `{w}` is not a worker name of workload `{}`; expected a role prefix, \
                 optionally followed by a number: {}",
                path.display(),
                field_line(&text, "workers"),
                workload.name(),
                prefixes.join(", ")
            );
        }
    }
    if raw.events.is_empty() {
        bail!("{}: field `events`: expected at least one [[events]] table", path.display());
    }
    let mut event_names = Vec::new();
    for (i, e) in raw.events.iter().enumerate() {
        match e.get("name").and_then(|n| n.as_str()) {
            Some(n) if !n.is_empty() => event_names.push(n.to_string()),
            _ => bail!("{}: events[{i}]: field `name`: expected a label such as \"e1\"", path.display()),
        }
    }
    // The workload checks its fields now, so that a bad file fails before any service starts.
    let mut names = crate::sim::names::Names::default();
    workload
        .events(&raw.events, uuid::Uuid::nil(), &mut names)
        .map_err(|e| anyhow!("{}: field `events`: {e}", path.display()))?;
    let visibility_timeout_s = match raw.config.remove("visibility_timeout_s") {
        None => None,
        Some(toml::Value::Integer(n)) if n > 0 => Some(n as u64),
        Some(v) => bail!(
            "{}:{}: field `config.visibility_timeout_s`: expected a positive number of seconds, found {v}",
            path.display(),
            field_line(&text, "visibility_timeout_s")
        ),
    };
    workload
        .config(raw.config.clone())
        .map_err(|e| anyhow!("{}:{}: field `config`: {e}", path.display(), field_line(&text, "[config]")))?;
    let mut sql_invariants = Vec::new();
    for (i, inv) in raw.invariants.iter().enumerate() {
        let kind = match inv.kind.as_deref() {
            None | Some("excess") => crate::checker::CulpritKind::Excess,
            Some("missing") => crate::checker::CulpritKind::Missing,
            Some(other) => bail!(
                "{}: invariants[{i}] ({}): field `kind`: expected `excess` or `missing`, found `{other}`",
                path.display(),
                inv.name
            ),
        };
        if inv.sql.trim().is_empty() {
            bail!("{}: invariants[{i}] ({}): field `sql`: expected a query returning the violating rows", path.display(), inv.name);
        }
        sql_invariants.push(crate::checker::SqlInvariant { name: inv.name.clone(), sql: inv.sql.clone(), kind });
    }
    let root_dir = root.canonicalize().ok().and_then(|r| r.parent().map(Path::to_path_buf)).unwrap_or_else(|| PathBuf::from("."));
    let mut external = Vec::new();
    for (role, ext) in std::mem::take(&mut raw.external) {
        let ext = crate::sim::wire::External::resolve(&role, ext, &vocabulary.roles, &root_dir)
            .map_err(|e| anyhow!("{}:{}: [external.{role}]: {e}", path.display(), field_line(&text, &format!("[external.{role}]"))))?;
        external.push(Arc::new(ext));
    }
    Ok(Some(Scenario {
        name,
        workload,
        path: path.to_path_buf(),
        description: raw.description,
        workers,
        schedule,
        explore: raw.explore,
        exhaustive: raw.exhaustive,
        expect_trace: raw.expect_trace,
        config: raw.config,
        visibility_timeout_s,
        events: raw.events,
        event_names,
        sql_invariants,
        external,
    }))
}

fn parse_schedule(text: &str, path: &Path, spanned: &toml::Spanned<String>, vocabulary: &Vocabulary) -> Result<Schedule> {
    let span = spanned.span();
    let mut start = span.start;
    let lit = &text[span.clone()];
    if lit.starts_with("\"\"\"") || lit.starts_with("'''") {
        start += 3;
        if text[start..].starts_with('\n') {
            start += 1;
        }
    } else {
        start += 1;
    }
    let first_line = line_of(text, start);
    schedule::parse(spanned.get_ref(), vocabulary).map_err(|e| {
        anyhow!(
            "{}:{}: field `schedule`: `{}`: {}",
            path.display(),
            first_line + e.line - 1,
            e.token,
            e.message
        )
    })
}

fn field_line(text: &str, field: &str) -> usize {
    text.lines().position(|l| l.trim_start().starts_with(field)).map(|i| i + 1).unwrap_or(1)
}

