//! What `run`, `repro` and `catalogue` print to stdout: schedules, traces, verdicts,
//! exploration summaries and the commands that reproduce a failure.

use crate::explore::{exhaustive::Enumeration, Report, Stats};
use crate::report::model::repro_commands;
use crate::report::violation::breaking_line;
use crate::scenario::{Scenario, ScenarioOutcome};

/// Prints the last lines of the log of each worker process that exited by itself in `o`
/// (what it said as it died: a traceback, an unhandled rejection).
fn exit_logs(o: &ScenarioOutcome) {
    for e in &o.history.entries {
        if let crate::record::history::Entry::Crash { worker, exited: Some(x), .. } = e {
            println!("{worker} exited by itself ({}); the last lines of its log:", x.how);
            for line in x.log_tail.lines() {
                println!("  | {line}");
            }
        }
    }
}

/// Prints one schedule's result: schedule, trace, invariants, where it broke, verdict.
pub fn outcome(s: &Scenario, o: &ScenarioOutcome) {
    println!("schedule: {}", o.schedule);
    println!("trace:");
    for line in o.trace.lines() {
        println!("  {line}");
    }
    println!("invariants:");
    for v in &o.verdicts {
        let mark = if v.holds { "ok  " } else { "FAIL" };
        if v.detail.is_empty() {
            println!("  {mark} {}", v.invariant);
        } else {
            println!("  {mark} {}: {}", v.invariant, v.detail);
        }
    }
    for f in &o.missing_trace_facts {
        println!("  FAIL expected trace fact missing: {f:?}");
    }
    if let Some(b) = breaking_line(o) {
        println!("breaks at: {}", b.trim());
    }
    exit_logs(o);
    let net = if o.calls.net > 0 { format!(", {} http to providers", o.calls.net) } else { String::new() };
    println!("calls: {} pg, {} sqs, {} redis{net}", o.calls.pg, o.calls.sqs, o.calls.redis);
    println!("{} {}\n", if o.passed() { "PASS" } else { "FAIL" }, s.name);
}

fn throughput(st: &Stats) -> String {
    let (pg, sqs, redis) = st.calls_per_schedule();
    let net = match st.net_per_schedule() {
        n if n > 0.0 => format!(", {n:.1} http to providers"),
        _ => String::new(),
    };
    format!(
        "in {:.1} s: {:.1} schedules/s; calls per schedule: {pg:.1} pg, {sqs:.1} sqs, {redis:.1} redis{net}",
        st.wall.as_secs_f64(),
        st.per_second()
    )
}

fn coverage(st: &Stats) {
    println!("crash-point coverage:");
    for line in st.coverage_table().lines() {
        println!("  {line}");
    }
}

/// Prints an exploration's summary, coverage and, for a failure, the minimal schedule, its
/// trace and the commands that reproduce it.
pub fn exploration(s: &Scenario, system: &str, r: &Report) {
    let st = &r.stats;
    println!("{} schedules {}", st.schedules, throughput(st));
    if let Some(d) = &st.determinism {
        println!("{}", d.line());
    }
    if let Some(line) = st.reused_line() {
        println!("{line}");
    }
    coverage(st);
    let Some(f) = &r.failure else {
        println!("PASS {} ({system})\n", s.name);
        return;
    };
    if let Some(d) = &f.divergence {
        println!("FAIL {} ({system}): not deterministic; first divergence at {d}", s.name);
    }
    let broken: Vec<String> =
        f.minimal.verdicts.iter().filter(|v| !v.holds).map(|v| format!("{}: {}", v.invariant, v.detail)).collect();
    if !broken.is_empty() {
        println!("FAIL {} ({system}): {}", s.name, broken.join("; "));
    }
    println!(
        "found at schedule {}{}; shrunk from {} to {} decisions in {} runs",
        f.schedules_until,
        f.case_seed.map(|c| format!(" (case seed {c})")).unwrap_or_else(|| " (a saved regression)".into()),
        f.original.decisions.len(),
        f.minimal.schedule.decisions.len(),
        f.shrink_runs
    );
    println!("minimal schedule: {}", f.minimal.schedule);
    println!("trace:");
    for line in f.minimal.trace.lines() {
        println!("  {line}");
    }
    if let Some(b) = breaking_line(&f.minimal) {
        println!("breaks at: {}", b.trim());
    }
    exit_logs(&f.minimal);
    let cmds = repro_commands(s, system, &f.minimal.schedule, f.repro_seed(), Some(&f.original));
    println!("reproduce: {}", cmds[0]);
    if let Some(c) = cmds.get(1) {
        println!("           {c}    (the schedule before shrinking)");
    }
    println!();
}

/// Prints an enumeration's summary and its first failing interleaving.
pub fn enumeration(s: &Scenario, system: &str, e: &Enumeration) {
    let st = &e.stats;
    println!("exhaustive: {} interleavings ({} with a crash) {}", st.schedules, e.with_crash, throughput(st));
    coverage(st);
    let Some(f) = &e.failure else {
        println!("PASS {} ({system}): every interleaving holds every invariant\n", s.name);
        return;
    };
    outcome(s, f);
    println!("reproduce: {}\n", repro_commands(s, system, &f.schedule, None, None)[0]);
}
