use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;

use crate::schedule::{self, Schedule};
use crate::sim::programs::Role;
use crate::sut::SystemConfig;

/// One event of a scenario, by label.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSpec {
    /// Event label, e.g. `e1`; its `event_id` is derived from it.
    pub name: String,
    /// Payment label, e.g. `p1`; events sharing it pay the same payment.
    pub payment: String,
    /// Merchant label.
    #[serde(default = "default_merchant")]
    pub merchant: String,
    /// Amount in minor units (> 0).
    #[serde(default = "default_amount")]
    pub amount_minor: i64,
    /// ISO 4217 code.
    #[serde(default = "default_currency")]
    pub currency: String,
}

fn default_merchant() -> String {
    "mer1".into()
}
fn default_amount() -> i64 {
    12_500
}
fn default_currency() -> String {
    "EUR".into()
}

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
    config: SystemConfig,
    events: Vec<EventSpec>,
}

/// A loaded scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// `<group>/<name>`, from its path under `scenarios/`.
    pub name: String,
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
    /// System timing and retries.
    pub config: SystemConfig,
    /// Events, in dispatch order.
    pub events: Vec<EventSpec>,
}

/// The scenarios directory: `$CRASHPOINT_SCENARIOS`, else `./scenarios` if it exists, else
/// the one in the source tree this binary was built from.
pub fn scenarios_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CRASHPOINT_SCENARIOS") {
        return PathBuf::from(d);
    }
    let local = PathBuf::from("scenarios");
    if local.is_dir() {
        return local;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

/// Every scenario under `dir`, sorted by name. Errors: a file that does not load.
pub fn discover(dir: &Path) -> Result<Vec<Scenario>> {
    let mut files = Vec::new();
    collect(dir, &mut files).with_context(|| format!("reading scenarios from {}", dir.display()))?;
    files.sort();
    files.iter().map(|f| load(dir, f)).collect()
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

/// Loads `path` (a file under `root`). Errors name the file, line and field.
pub fn load(root: &Path, path: &Path) -> Result<Scenario> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let raw: Raw = toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let name = path
        .strip_prefix(root)
        .unwrap_or(path)
        .with_extension("")
        .to_string_lossy()
        .replace('\\', "/");
    let schedule = match &raw.schedule {
        Some(spanned) => parse_schedule(&text, path, spanned)?,
        None if raw.explore.is_some() => Schedule::default(),
        None => bail!(
            "{}: field `schedule`: expected a schedule (or an [explore] table for generated schedules)",
            path.display()
        ),
    };
    let workers: Vec<String> = raw.workers.split_whitespace().map(str::to_string).collect();
    for w in &workers {
        if Role::of(w).is_none() {
            bail!(
                "{}:{}: field `workers`: `{w}` is not a worker name; expected p, cN, rN, dN or ret",
                path.display(),
                field_line(&text, "workers")
            );
        }
    }
    if raw.events.is_empty() {
        bail!("{}: field `events`: expected at least one [[events]] table", path.display());
    }
    for (i, e) in raw.events.iter().enumerate() {
        if e.amount_minor <= 0 || e.currency.len() != 3 {
            bail!(
                "{}: events[{i}] ({}): expected amount_minor > 0 and a 3-letter currency",
                path.display(),
                e.name
            );
        }
    }
    Ok(Scenario {
        name,
        path: path.to_path_buf(),
        description: raw.description,
        workers,
        schedule,
        explore: raw.explore,
        exhaustive: raw.exhaustive,
        expect_trace: raw.expect_trace,
        config: raw.config,
        events: raw.events,
    })
}

fn parse_schedule(text: &str, path: &Path, spanned: &toml::Spanned<String>) -> Result<Schedule> {
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
    schedule::parse(spanned.get_ref()).map_err(|e| {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p
    }

    const GOOD: &str = "description = \"d\"\nworkers = \"p c1\"\nschedule = \"\"\"\np:lock\n  c1:crash@after_lunch\n\"\"\"\n[[events]]\nname = \"e1\"\npayment = \"p1\"\n";

    #[test]
    fn schedule_errors_name_file_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "bad.toml", GOOD);
        let e = load(dir.path(), &p).unwrap_err().to_string();
        assert!(e.contains("bad.toml:5: field `schedule`"), "{e}");
        assert!(e.contains("unknown crash point `after_lunch`"), "{e}");
    }

    #[test]
    fn unknown_fields_and_workers_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "w.toml", &GOOD.replace("p c1", "p x1").replace("after_lunch", "after_claim"));
        let e = load(dir.path(), &p).unwrap_err().to_string();
        assert!(e.contains("w.toml:2: field `workers`: `x1`"), "{e}");
        let p = write(dir.path(), "u.toml", &format!("colour = 1\n{}", GOOD.replace("after_lunch", "after_claim")));
        let e = load(dir.path(), &p).unwrap_err().to_string();
        assert!(e.contains("u.toml") && e.contains("line 1") && e.contains("colour"), "{e}");
    }
}
