use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;

use std::sync::Arc;

use crate::schedule::text::DECISIONS_MAX;
use crate::schedule::{self, Schedule, Vocabulary};
use crate::workload::{Registry, Workload};
use crate::spec::role_of;

/// Bounds for generated schedules (`[explore]` in a scenario file).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExploreSpec {
    /// Most decisions per generated schedule (default 24; at most
    /// [`crate::schedule::text::DECISIONS_MAX`], 10,000).
    #[serde(default = "default_decisions_max")]
    pub decisions_max: usize,
    /// Put the AWS-only SQS faults (`sqs:stale-delete-noop`, `sqs:redeliver-after-delete`,
    /// `sqs:receive-lost`, `sqs:batch-delete-partial`) on the menu (default false).
    #[serde(default)]
    pub sqs_faults: bool,
    /// Put the PostgreSQL outcome faults (`pg:commit-response-lost`, `pg:connection-reset`)
    /// on the menu (default false).
    #[serde(default)]
    pub pg_faults: bool,
    /// Put the Redis faults (`redis:restart`, `redis:lose-lock`) on the menu (default true;
    /// `false` for a workload whose workers never call Redis, where they change nothing and
    /// take a share of the budget).
    #[serde(default = "yes")]
    pub redis_faults: bool,
    /// Put graceful stops of the in-process handlers (`c1:stop`) on the menu (default false).
    #[serde(default)]
    pub stops: bool,
    /// Calls whose applied-then-unanswered crash is on the menu (`crash@<call>:applied`,
    /// e.g. `["commit"]`; default none). For external workers: the call reaches PostgreSQL and
    /// takes effect, and the worker is killed before the reply reaches it.
    #[serde(default)]
    pub applied: Vec<String>,
    /// Relative weights of the workers, e.g. `{ p = 4 }` (default: every worker 1). A
    /// generated decision that picks a worker (a step, a crash, a crash or failure at a crash
    /// point, a restart, a stop, an applied crash) draws each of its choices (a worker, or a
    /// worker with one of its crash points or calls) in proportion to that worker's weight.
    /// Periodic workers are stepped by a separate draw and take no weight. A weight is from
    /// 1 to [`crate::schedule::WORKER_WEIGHT_MAX`] (1000). Opt-in, because a weight changes
    /// which schedules a run seed generates.
    #[serde(default)]
    pub worker_weights: std::collections::BTreeMap<String, u32>,
    /// Put the boundary after every call a role makes (`crash@after_<call>`,
    /// `fail@after_<call>`, [`crate::spec::after_call`]) on the menu, beside its declared crash
    /// points (default false). The calls are those each role makes when the scenario runs with
    /// no decision (the drain alone), found once per exploration and for `repro --seed`.
    #[serde(default)]
    pub call_boundaries: bool,
    /// How schedules are generated: `"guided"` (default), every third one a mutation of
    /// earlier schedules that reached new coverage (the abstract signal of
    /// `explore/signal.rs`) between the uniform ones, or `"uniform"`, each drawn afresh from
    /// the menu.
    #[serde(default)]
    pub strategy: Strategy,
    /// Set by `--all-faults` ([`Scenario::with_all_faults`]), never by the file: every engine
    /// fault the scenario's workers can take is on the menu, and repro commands say so.
    #[serde(skip)]
    pub all_faults: bool,
}

/// How an exploration generates its schedules (`[explore] strategy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Every schedule drawn afresh from the menu.
    Uniform,
    /// Schedules that reached new coverage are kept and mutated (insert, delete, replace one
    /// decision, splice two, extend a prefix, let one worker lag, let a queue's handlers gather
    /// two copies of a message) every third case; the others are uniform generation's cases,
    /// in their order ([`crate::schedule::mutate`]). The default: over seeds 1–10 at the
    /// default budget it caught every mutant of the in-tree catalogues on every seed, where
    /// uniform generation missed two windows on some (`data/detection/`).
    #[default]
    Guided,
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
    workload: Option<toml::Spanned<String>>,
    description: String,
    workers: toml::Spanned<String>,
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
    events: Vec<toml::Spanned<toml::Table>>,
    #[serde(default)]
    invariants: Vec<toml::Spanned<InvariantSpec>>,
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

impl InvariantSpec {
    /// The `[[invariants]]` tables of file `path` (text `text`) as SQL invariants, each
    /// knowing its file and line. Errors: a `kind` other than `excess` or `missing`, an empty
    /// query, named by file, line and field.
    pub fn resolve_all(path: &Path, text: &str, tables: &[toml::Spanned<InvariantSpec>]) -> Result<Vec<crate::checker::SqlInvariant>> {
        let mut out = Vec::new();
        for (i, spanned) in tables.iter().enumerate() {
            let line = line_of(text, spanned.span().start);
            let inv = spanned.get_ref();
            let kind = match inv.kind.as_deref() {
                None | Some("excess") => crate::checker::CulpritKind::Excess,
                Some("missing") => crate::checker::CulpritKind::Missing,
                Some(other) => bail!(
                    "{}:{line}: field `invariants[{i}].kind` ({}): expected `excess` or `missing`, found `{other}`",
                    path.display(),
                    inv.name
                ),
            };
            if inv.sql.trim().is_empty() {
                bail!("{}:{line}: field `invariants[{i}].sql` ({}): expected a query returning the violating rows", path.display(), inv.name);
            }
            out.push(crate::checker::SqlInvariant {
                name: inv.name.clone(),
                sql: inv.sql.clone(),
                kind,
                origin: Some(format!("{}:{line}: field `invariants[{i}]`", path.display())),
            });
        }
        Ok(out)
    }
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
    /// The workload's handler policy from `[config]` (without `visibility_timeout_s`,
    /// `fifo_queues` and `dead_letter`, which are the engine's).
    pub config: toml::Table,
    /// `[config] visibility_timeout_s`: overrides every queue's visibility timeout, logical s.
    pub visibility_timeout_s: Option<u64>,
    /// `[config] fifo_queues`: the workload's queues this scenario makes FIFO queues
    /// ([`crate::spec::QueueSpec::fifo`]), e.g. `["payments"]`.
    pub fifo_queues: Vec<&'static str>,
    /// `[config] dead_letter`: a dead-letter queue for one of the workload's queues
    /// (`super::dead_letter`).
    pub dead_letter: Option<super::dead_letter::DeadLetterConfig>,
    /// The `[[events]]` tables, in dispatch order, as the workload reads them.
    pub events: Vec<toml::Table>,
    /// The event labels (`name` of each `[[events]]` table).
    pub event_names: Vec<String>,
    /// The scenario's own SQL invariants (`[[invariants]]`), checked after the workload's.
    pub sql_invariants: Vec<crate::checker::SqlInvariant>,
    /// Roles played by external worker processes (`[external.<role>]`, see `crate::sim::wire`).
    pub external: Vec<Arc<crate::sim::wire::External>>,
}

impl Scenario {
    /// Every invariant a schedule of this scenario is checked against, in order: the
    /// workload's, the scenario's `[[invariants]]`, then the engine's own that the workload does
    /// not already list (`crate::checker::with_engine_invariants`).
    pub fn invariants(&self) -> Vec<Box<dyn crate::checker::Invariant>> {
        let mut all = self.workload.invariants();
        all.extend(self.sql_invariants.iter().cloned().map(|i| Box::new(i) as Box<dyn crate::checker::Invariant>));
        crate::checker::with_engine_invariants(all)
    }

    /// This scenario with every engine fault on the exploration menu (`--all-faults`): the SQS
    /// faults, the PostgreSQL outcome faults and graceful stops. The network and provider faults of a workload
    /// with providers are on every menu already. A scripted scenario is returned unchanged.
    pub fn with_all_faults(mut self) -> Scenario {
        if let Some(e) = self.explore.as_mut() {
            e.sqs_faults = true;
            e.pg_faults = true;
            e.stops = true;
            e.all_faults = true;
        }
        self
    }
}

/// The scenarios directory: `$CRASHPOINT_SCENARIOS`, else `./scenarios`. Only a binary run
/// inside the crashpoint checkout it was built from (a test's working directory is its crate's)
/// falls back to the checkout's `scenarios/`: an installed binary run from a team's repository
/// reads that repository's scenarios, wherever it was built.
pub fn scenarios_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CRASHPOINT_SCENARIOS") {
        return PathBuf::from(d);
    }
    let local = PathBuf::from("scenarios");
    if local.is_dir() {
        return local;
    }
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    match (std::env::current_dir().and_then(|d| d.canonicalize()), checkout.canonicalize()) {
        (Ok(here), Ok(checkout)) if here.starts_with(&checkout) => checkout.join("scenarios"),
        _ => local,
    }
}

/// Every scenario under `dir`, sorted by name, each for its workload in `registry`.
/// Errors: a file that does not load.
pub fn discover(dir: &Path, registry: &Registry) -> Result<Vec<Scenario>> {
    if !dir.is_dir() {
        let here = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default();
        bail!(
            "no scenarios directory `{}` (working directory {here}): crashpoint reads the `scenarios/` of the directory \
             it runs in, or $CRASHPOINT_SCENARIOS; `crashpoint init .` writes a first one",
            dir.display()
        );
    }
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
        } else if p.extension().is_some_and(|x| x == "toml") && !is_workload_file(&p) {
            out.push(p);
        }
    }
    Ok(())
}

/// The suffix of a workload file, which declares a workload rather than a scenario
/// (`scenarios/invoices.workload.toml`): scenario discovery skips it.
pub const WORKLOAD_FILE_SUFFIX: &str = ".workload.toml";

/// Whether `p` is a workload file ([`WORKLOAD_FILE_SUFFIX`]).
pub fn is_workload_file(p: &Path) -> bool {
    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(WORKLOAD_FILE_SUFFIX))
}

/// The 1-based line of byte `offset` of `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|b| **b == b'\n').count() + 1
}

/// The visibility timeouts a scenario may set, logical s: SQS's range above 0, up to 12 h.
const VISIBILITY_TIMEOUT_MAX_S: i64 = 43_200;

/// Loads `path` (a file under `root`) for the workload it names (see [`Scenario::workload`]).
/// Errors name the file, line and field, and say what was expected; they never panic, whatever
/// the bytes of the file. (`Ok(None)` is reserved for files to skip; none is skipped today.)
pub fn load(root: &Path, path: &Path, registry: &Registry) -> Result<Option<Scenario>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = utf8(path, bytes)?;
    let mut raw: Raw = toml::from_str(&text).map_err(|e| toml_error(path, &text, &e))?;
    let name = path
        .strip_prefix(root)
        .unwrap_or(path)
        .with_extension("")
        .to_string_lossy()
        .replace('\\', "/");
    let group = name.split('/').next().unwrap_or_default();
    let workload = match &raw.workload {
        Some(w) => registry.get(w.get_ref()).ok_or_else(|| {
            anyhow!(
                "{}:{}: field `workload`: unknown workload `{}`; expected one of {}",
                path.display(),
                line_of(&text, w.span().start),
                w.get_ref(),
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
            "{}:1: field `schedule`: expected a schedule (or an [explore] table for generated schedules)",
            path.display()
        ),
    };
    let workers_line = line_of(&text, raw.workers.span().start);
    let mut workers: Vec<String> = Vec::new();
    for w in raw.workers.get_ref().split_whitespace() {
        if role_of(&vocabulary.roles, w).is_none() {
            let prefixes: Vec<String> = vocabulary.roles.iter().map(|r| format!("{} ({})", r.prefix, r.about)).collect();
            bail!(
                "{}:{workers_line}: field `workers`: `{w}` is not a worker name of workload `{}`; expected a role prefix, \
                 optionally followed by a number: {}",
                path.display(),
                workload.name(),
                prefixes.join(", ")
            );
        }
        if workers.iter().any(|x| x == w) {
            bail!("{}:{workers_line}: field `workers`: `{w}` is named twice; expected each worker once", path.display());
        }
        workers.push(w.to_string());
    }
    if let Some(ex) = &raw.exhaustive {
        if let Some(w) = ex.workers.split_whitespace().find(|w| !workers.iter().any(|x| x == w)) {
            bail!(
                "{}:{}: field `exhaustive.workers`: `{w}` is not one of the scenario's workers ({})",
                path.display(),
                line_of_field(&text, "exhaustive.workers"),
                workers.join(" ")
            );
        }
    }
    if let Some(ex) = &raw.explore {
        let periodic = |w: &String| role_of(&vocabulary.roles, w).is_some_and(|r| r.kind == crate::spec::RoleKind::Periodic);
        if workers.iter().all(periodic) {
            bail!(
                "{}:{workers_line}: field `workers`: every worker is periodic ({}); expected at least one that generated \
                 decisions can step, crash and restart",
                path.display(),
                workers.join(" ")
            );
        }
        if ex.decisions_max > DECISIONS_MAX {
            bail!(
                "{}:{}: field `explore.decisions_max`: expected at most {DECISIONS_MAX} decisions per schedule, found {}",
                path.display(),
                line_of_field(&text, "explore.decisions_max"),
                ex.decisions_max
            );
        }
        // In name order (a BTreeMap): of several bad entries, the first by name is reported.
        for (w, weight) in &ex.worker_weights {
            let field = format!("explore.worker_weights.{w}");
            // The worker's own line under an `[explore.worker_weights]` header, else the line of
            // the inline table, which comes after `[explore]`.
            let at = |f: &str| line_of_field(&text, f).max(line_of_field(&text, "explore.worker_weights"));
            if !workers.iter().any(|x| x == w) {
                bail!(
                    "{}:{}: field `{field}`: `{w}` is not one of the scenario's workers ({})",
                    path.display(),
                    at(&field),
                    workers.join(" ")
                );
            }
            if periodic(w) {
                bail!("{}:{}: field `{field}`: `{w}` is periodic, stepped by a separate draw that takes no weight; expected a worker that is not periodic", path.display(), at(&field));
            }
            if !(1..=schedule::WORKER_WEIGHT_MAX).contains(weight) {
                bail!(
                    "{}:{}: field `{field}`: expected a weight from 1 to {}, found {weight}",
                    path.display(),
                    at(&field),
                    schedule::WORKER_WEIGHT_MAX
                );
            }
        }
        if let Some(op) = ex.applied.iter().find(|op| op.is_empty() || !op.chars().all(|c| c.is_ascii_lowercase() || c == '_')) {
            bail!(
                "{}:{}: field `explore.applied`: `{op}` is not a call name; expected lower-case letters and `_`, e.g. \"commit\"",
                path.display(),
                line_of_field(&text, "explore.applied")
            );
        }
    }
    if raw.events.is_empty() {
        bail!(
            "{}:{}: field `events`: expected at least one [[events]] table",
            path.display(),
            line_of_field(&text, "events")
        );
    }
    let event_lines: Vec<usize> = raw.events.iter().map(|e| line_of(&text, e.span().start)).collect();
    let events: Vec<toml::Table> = raw.events.into_iter().map(toml::Spanned::into_inner).collect();
    let mut event_names = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match e.get("name").and_then(|n| n.as_str()) {
            Some(n) if !n.is_empty() => event_names.push(n.to_string()),
            _ => bail!("{}:{}: field `events[{i}].name`: expected a label such as \"e1\"", path.display(), event_lines[i]),
        }
    }
    if let Some(spanned) = &raw.schedule {
        check_names(&text, path, spanned, &schedule, &workers, &event_names)?;
    }
    // The workload checks its fields now, so that a bad file fails before any service starts.
    let mut names = crate::record::labels::Labels::default();
    workload.events(&events, uuid::Uuid::nil(), &mut names).map_err(|e| {
        // The workload's message starts with `events[i]` when it names a table.
        let i = e.strip_prefix("events[").and_then(|r| r.split(']').next()).and_then(|i| i.parse::<usize>().ok());
        let line = i.and_then(|i| event_lines.get(i)).unwrap_or(&event_lines[0]);
        anyhow!("{}: field `events`: {e} (line {line})", path.display())
    })?;
    let visibility_timeout_s = match raw.config.remove("visibility_timeout_s") {
        None => None,
        Some(toml::Value::Integer(n)) if (1..=VISIBILITY_TIMEOUT_MAX_S).contains(&n) => Some(n as u64),
        Some(v) => bail!(
            "{}:{}: field `config.visibility_timeout_s`: expected a positive number of seconds, at most \
             {VISIBILITY_TIMEOUT_MAX_S} (SQS's maximum, 12 h), found {v}",
            path.display(),
            line_of_field(&text, "config.visibility_timeout_s")
        ),
    };
    let fifo_queues = fifo_queues(raw.config.remove("fifo_queues"), &workload.queues())
        .map_err(|e| anyhow!("{}:{}: field `config.fifo_queues`: {e}", path.display(), line_of_field(&text, "config.fifo_queues")))?;
    let dead_letter = super::dead_letter::parse(raw.config.remove("dead_letter"), &workload.queues(), &fifo_queues)
        .map_err(|e| anyhow!("{}:{}: field `config.dead_letter`: {e}", path.display(), line_of_field(&text, "config.dead_letter")))?;
    workload
        .config(raw.config.clone())
        .map_err(|e| anyhow!("{}:{}: field `config`: {e}", path.display(), line_of_field(&text, "config")))?;
    let sql_invariants = InvariantSpec::resolve_all(path, &text, &raw.invariants)?;
    let root_dir = root.canonicalize().ok().and_then(|r| r.parent().map(Path::to_path_buf)).unwrap_or_else(|| PathBuf::from("."));
    let mut external = Vec::new();
    for (role, ext) in std::mem::take(&mut raw.external) {
        let ext = crate::sim::wire::External::resolve(&role, ext, &vocabulary.roles, &root_dir).map_err(|e| {
            anyhow!("{}:{}: [external.{role}]: {e}", path.display(), line_of_field(&text, &format!("external.{role}")))
        })?;
        external.push(Arc::new(ext));
    }
    // The workload's own external roles, where the scenario does not play the role itself.
    for ext in workload.external() {
        if !external.iter().any(|e| e.role == ext.role) {
            external.push(ext);
        }
    }
    external.sort_by_key(|e| e.role);
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
        fifo_queues,
        dead_letter,
        events,
        event_names,
        sql_invariants,
        external,
    }))
}

/// The text of a scenario file. Errors: its first byte that is not UTF-8, by line and column
/// (and the field it is in, when a key line precedes it).
pub fn utf8(path: &Path, bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let before = std::str::from_utf8(&bytes[..valid]).unwrap_or_default();
        let line = line_of(before, before.len());
        let column = before.rsplit('\n').next().unwrap_or_default().chars().count() + 1;
        let field = field_at(before, before.len(), true).map(|f| format!(" field `{f}`:")).unwrap_or_default();
        anyhow!("{}:{line}:{column}:{field} byte 0x{:02x} is not UTF-8; expected a UTF-8 text file", path.display(), bytes[valid])
    })
}

/// A TOML error of scenario file `path` (text `text`): toml's own message, with the line and
/// column (toml gives every error of a document a span), and before it the field, when one
/// can be told. A file that is not TOML names the field only when the error is on a
/// `key = …` line, or in a table.
pub fn toml_error(path: &Path, text: &str, e: &toml::de::Error) -> anyhow::Error {
    let syntax = text.parse::<toml::Table>().is_err();
    let field = e.span().and_then(|span| {
        let missing = e.message().strip_prefix("missing field `").and_then(|m| m.split_once('`')).map(|(f, _)| f);
        match missing {
            // The span is the table's: its header, or the top of the file for the root table.
            Some(f) => {
                let line = text.lines().nth(line_of(text, span.start) - 1).unwrap_or_default();
                Some(header_of(line).map(|t| format!("{t}.{f}")).unwrap_or_else(|| f.to_string()))
            }
            None => field_at(text, span.start, !syntax),
        }
    });
    match field {
        Some(f) => anyhow!("{}: field `{f}`: {e}", path.display()),
        None => anyhow!("{}: {e}", path.display()),
    }
}

/// Where a scripted schedule's text sits in its file, to turn its lines into the file's.
struct ScheduleSource {
    /// The file's line holding the schedule's first line.
    first_line: usize,
    /// The schedule's lines are the file's: a literal string, or a basic one without escapes.
    /// (An escape such as `\n` or a line-ending `\` moves lines: every line is then reported
    /// as the first.)
    exact: bool,
}

impl ScheduleSource {
    fn of(text: &str, spanned: &toml::Spanned<String>) -> ScheduleSource {
        let span = spanned.span();
        let literal = text.get(span.clone()).unwrap_or_default();
        let mut start = span.start;
        if literal.starts_with("\"\"\"") || literal.starts_with("'''") {
            // A newline right after the opening quotes is not part of the string.
            start += 3;
            let rest = text.get(start..).unwrap_or_default();
            start += if rest.starts_with("\r\n") { 2 } else { usize::from(rest.starts_with('\n')) };
        }
        ScheduleSource { first_line: line_of(text, start), exact: literal.starts_with('\'') || !literal.contains('\\') }
    }

    /// The file's line of line `line` (1-based) of the schedule.
    fn line(&self, line: usize) -> usize {
        if self.exact {
            self.first_line + line - 1
        } else {
            self.first_line
        }
    }
}

fn parse_schedule(text: &str, path: &Path, spanned: &toml::Spanned<String>, vocabulary: &Vocabulary) -> Result<Schedule> {
    let source = ScheduleSource::of(text, spanned);
    schedule::parse(spanned.get_ref(), vocabulary).map_err(|e| {
        anyhow!("{}:{}: field `schedule`: `{}`: {}", path.display(), source.line(e.line), e.token, e.message)
    })
}

/// Checks that each decision of the scripted `schedule` names only `workers` and `events`.
/// Errors: the first that names another, with its line (the engine would only find out when
/// the schedule reaches it).
fn check_names(
    text: &str,
    path: &Path,
    spanned: &toml::Spanned<String>,
    schedule: &Schedule,
    workers: &[String],
    events: &[String],
) -> Result<()> {
    let source = ScheduleSource::of(text, spanned);
    // `parse` made one decision of each token, in order.
    for (token, d) in schedule::text::tokens(spanned.get_ref()).zip(&schedule.decisions) {
        let one = Schedule { decisions: vec![d.clone()] };
        if let Some(why) = one.unknown_names(workers, events).into_iter().next() {
            bail!("{}:{}: field `schedule`: {why}", path.display(), source.line(token.line));
        }
    }
    Ok(())
}

/// `[config] fifo_queues`: an array of the workload's queue names. Errors: another type, or a
/// name the workload does not declare (the message lists its queues).
fn fifo_queues(v: Option<toml::Value>, queues: &[crate::spec::QueueSpec]) -> Result<Vec<&'static str>, String> {
    let known = || queues.iter().map(|q| q.name).collect::<Vec<_>>().join(", ");
    let Some(v) = v else { return Ok(Vec::new()) };
    let toml::Value::Array(names) = v else {
        return Err(format!("expected an array of queue names ({}), found {v}", known()));
    };
    names
        .iter()
        .map(|n| {
            let found = n.as_str().and_then(|n| queues.iter().find(|q| q.name == n));
            found.map(|q| q.name).ok_or_else(|| format!("expected one of the workload's queues ({}), found {n}", known()))
        })
        .collect()
}

/// The 1-based line of field `name` (dotted, e.g. `config.visibility_timeout_s`): the first
/// table header or `key = …` line whose dotted name is `name` or lies under it, else the first
/// whose name contains it (an inline table), else 1. Line-based: it reads files as people
/// write them, one key per line.
pub fn line_of_field(text: &str, name: &str) -> usize {
    let mut table = String::new();
    let mut outer = None;
    for (i, line) in text.lines().enumerate() {
        let path = match (header_of(line), key_of(line)) {
            (Some(h), _) => {
                table = h.clone();
                h
            }
            (None, Some(k)) if table.is_empty() => k,
            (None, Some(k)) => format!("{table}.{k}"),
            (None, None) => continue,
        };
        if path == name || path.starts_with(&format!("{name}.")) {
            return i + 1;
        }
        if outer.is_none() && name.starts_with(&format!("{path}.")) {
            outer = Some(i + 1);
        }
    }
    outer.unwrap_or(1)
}

/// The dotted name of the field at byte `offset` of `text`: the key of the line it is on or,
/// with `walk_back` (a value spanning lines, such as an array), of the nearest key line above
/// it, under the table header above that. `None` when there is no key or header to name.
fn field_at(text: &str, offset: usize, walk_back: bool) -> Option<String> {
    let line = line_of(text, offset);
    let lines: Vec<&str> = text.lines().take(line).collect();
    let mut key = None;
    for (i, l) in lines.iter().enumerate().rev() {
        if let Some(table) = header_of(l) {
            return Some(match key {
                Some(k) => format!("{table}.{k}"),
                None => table,
            });
        }
        if key.is_none() && (walk_back || i + 1 == line) {
            key = key_of(l);
        }
    }
    key
}

/// The dotted name of a table header line (`[config]`, `[[events]]`, `[external.c]`).
fn header_of(line: &str) -> Option<String> {
    let t = line.trim_start();
    let (name, after) = match t.strip_prefix("[[") {
        Some(r) => r.split_once("]]")?,
        None => t.strip_prefix('[')?.split_once(']')?,
    };
    let after = after.trim_start();
    (after.is_empty() || after.starts_with('#')).then(|| dotted(name)).flatten()
}

/// The dotted key of a `key = …` line (`workers`, `config.retries`).
fn key_of(line: &str) -> Option<String> {
    dotted(line.trim_start().split_once('=')?.0)
}

/// `a . "b"` as `a.b`; `None` unless every part is a bare or quoted key.
fn dotted(name: &str) -> Option<String> {
    let parts: Vec<&str> = name.split('.').map(str::trim).collect();
    let key = |p: &&str| {
        let quoted = p.len() >= 2 && ((p.starts_with('"') && p.ends_with('"')) || (p.starts_with('\'') && p.ends_with('\'')));
        quoted || (!p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
    };
    parts.iter().all(key).then(|| parts.iter().map(|p| p.trim_matches(|c| c == '"' || c == '\'')).collect::<Vec<_>>().join("."))
}
