//! `summary.md`: a short Markdown page for a CI job summary (GitHub's `$GITHUB_STEP_SUMMARY`):
//! the verdict table, then for each failure its violated invariant, minimal schedule, the step
//! where it broke, the commands that reproduce it, and its trace folded away.

use std::fmt::Write;

use super::model::{Outcome, RunReport};

fn mark(o: Outcome) -> &'static str {
    match o {
        Outcome::Pass => "✅ PASS",
        Outcome::Fail => "❌ FAIL",
    }
}

/// Renders `run` as Markdown.
pub fn render(run: &RunReport) -> String {
    let mut md = String::new();
    let verdict = match run.verdict {
        Outcome::Pass => "PASS",
        Outcome::Fail => "FAIL",
    };
    let _ = writeln!(md, "## crashpoint {}: {verdict}\n", run.command);
    let budget = match (run.budget.schedules, run.budget.seconds) {
        (Some(n), Some(s)) => format!("{n} schedules or {s} s"),
        (Some(n), None) => format!("{n} schedules"),
        (None, Some(s)) => format!("{s} s"),
        (None, None) => "scripted only".into(),
    };
    let _ = writeln!(md, "seed {} · budget {budget} · shard {}/{}\n", run.seed, run.shard.index, run.shard.count);
    md.push_str("| scenario | system | kind | verdict | expected | schedules | schedules/s | violated invariant |\n");
    md.push_str("|---|---|---|---|---|---|---|---|\n");
    for s in &run.scenarios {
        let broken: Vec<&str> = s.invariants.iter().filter(|i| !i.holds).map(|i| i.invariant.as_str()).collect();
        let broken = if broken.is_empty() && s.verdict == Outcome::Fail { "see below".to_string() } else { broken.join("; ") };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {:.1} | {} |",
            s.name,
            s.system,
            format!("{:?}", s.kind).to_lowercase(),
            mark(s.verdict),
            if s.expected == Outcome::Fail { "fail (mutant)" } else { "pass" },
            s.schedules,
            s.schedules_per_s,
            if broken.is_empty() { "–" } else { &broken }
        );
    }
    for s in &run.scenarios {
        if let Some(d) = &s.determinism {
            let _ = writeln!(md, "\n{} ({}): {}", s.name, s.system, d.line());
        }
    }
    if let Some(e) = &run.error {
        let _ = writeln!(md, "\n**Harness or services error** (exit 2; the scenarios above ran before it):\n\n```text\n{e}\n```");
    }
    for c in &run.caveats {
        let _ = writeln!(md, "\n> ⚠️ {c}");
    }
    for s in run.scenarios.iter().filter(|s| s.failure.is_none()) {
        for c in &s.caveats {
            let _ = writeln!(md, "\n> ⚠️ {} ({}): {c}", s.name, s.system);
        }
    }
    for s in run.scenarios.iter().filter(|s| s.failure.is_some()) {
        let f = s.failure.as_ref().expect("filtered");
        let _ = writeln!(md, "\n### ❌ {} ({})\n", s.name, s.system);
        for v in &f.violated {
            let _ = writeln!(md, "- {v}");
        }
        let shrunk = if f.original != f.schedule {
            format!(
                " (shrunk from {} to {} decisions in {} runs)",
                f.original.split_whitespace().count(),
                f.schedule.split_whitespace().count(),
                f.shrink_runs
            )
        } else {
            String::new()
        };
        let _ = writeln!(md, "\nMinimal schedule{shrunk}:\n\n```text\n{}\n```\n", f.schedule);
        if let Some(b) = &f.breaking_step {
            let _ = writeln!(md, "Breaks at: `{}`\n", b.trim());
        }
        for c in &s.caveats {
            let _ = writeln!(md, "> ⚠️ {c}\n");
        }
        let _ = writeln!(md, "Reproduce:\n\n```sh\n{}\n```\n", f.repro.join("\n"));
        if let Some(t) = &f.timeline {
            let _ = writeln!(md, "Timeline: `{t}` in the report directory.\n");
        }
        let _ = writeln!(md, "<details><summary>trace</summary>\n\n```text\n{}```\n\n</details>", f.trace);
    }
    md
}
