//! Persisted minimal failures: `<scenario file stem>.regressions`, one schedule per line
//! (`#` comments), re-tried before any generated schedule.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};

use crate::scenario::{Scenario, ScenarioOutcome};
use crate::schedule::{self, Schedule};

/// The regressions file of scenario `s` for `system` (`<stem>.regressions` for the reference
/// system, `<stem>.<system>.regressions` otherwise).
pub fn path(s: &Scenario, system: &str) -> PathBuf {
    if system == "reference" {
        s.path.with_extension("regressions")
    } else {
        s.path.with_extension(format!("{system}.regressions"))
    }
}

/// The saved schedules, in file order. Errors name the file and line of a bad schedule.
pub fn load(s: &Scenario, system: &str) -> Result<Vec<Schedule>> {
    let p = path(s, system);
    let Ok(text) = std::fs::read_to_string(&p) else { return Ok(vec![]) };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|(i, l)| schedule::parse(l, &schedule::Vocabulary::of(s.workload.as_ref())).map_err(|e| anyhow!("{}:{}: {e}", p.display(), i + 1)))
        .collect()
}

/// Appends the minimal schedule of a failure (with the invariant it violates as a comment),
/// unless the file already has it.
pub fn save(s: &Scenario, system: &str, o: &ScenarioOutcome) -> Result<()> {
    if load(s, system)?.contains(&o.schedule) {
        return Ok(());
    }
    let p = path(s, system);
    let why: Vec<&str> = o.verdicts.iter().filter(|v| !v.holds).map(|v| v.invariant.as_str()).collect();
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&p).with_context(|| format!("writing {}", p.display()))?;
    writeln!(f, "# violates: {}", why.join("; "))?;
    writeln!(f, "{}", o.schedule)?;
    Ok(())
}
