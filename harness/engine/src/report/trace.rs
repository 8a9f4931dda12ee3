//! The trace: one line per step, in logical-time order.
//!
//! ```text
//!    0.000s  c2   claim                  ⧗ blocked by c1
//!    0.000s  c1   commit                 → ok
//!   31.000s  ~    visibility timeout of m1 expired: it can be received again
//! ```
//! Columns: logical time (s), worker (or `~` for the nemesis), the call, the crash point the
//! worker stood at (in brackets), and the result. Nothing in it depends on wall-clock time.

use std::fmt::Write;

use crate::sim::history::{Entry, History};

fn t(ms: u64) -> String {
    format!("{:>4}.{:03}s", ms / 1000, ms % 1000)
}

/// Marks the entry that starts the drain phase.
pub const DRAIN_MARK: &str = "drain:";

fn is_idle_result(result: &str) -> bool {
    result == "empty" || result == "0 rows"
}

/// Indices (into `history.entries`) of drain-phase steps that only polled: a receive that was empty, a select that
/// found nothing, and the begin/commit around such a select.
pub fn idle_polls(history: &History) -> std::collections::BTreeSet<usize> {
    let start = history
        .entries
        .iter()
        .position(|e| matches!(e, Entry::Fault { what, .. } if what.starts_with(DRAIN_MARK)))
        .unwrap_or(history.entries.len());
    let mut by_worker: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
    for (i, e) in history.entries.iter().enumerate().skip(start) {
        if let Entry::Step(s) = e {
            by_worker.entry(s.worker.as_str()).or_default().push(i);
        }
    }
    let step = |i: usize| match &history.entries[i] {
        Entry::Step(s) => Some(s),
        _ => None,
    };
    let mut hide = std::collections::BTreeSet::new();
    for idx in by_worker.values() {
        for (k, &i) in idx.iter().enumerate() {
            let s = step(i).expect("step");
            if is_idle_result(&s.result) {
                hide.insert(i);
                continue;
            }
            let next_idle = match idx.get(k + 1).and_then(|&j| step(j)) {
                Some(n) => n.op == "select" && n.result == "0 rows",
                None => true,
            };
            let prev_idle = k > 0 && step(idx[k - 1]).is_some_and(|p| p.op == "select" && p.result == "0 rows");
            if (s.op == "begin" && next_idle) || (s.op == "commit" && prev_idle) {
                hide.insert(i);
            }
        }
    }
    hide
}

/// One entry as a trace line, without the newline.
pub fn line(e: &Entry) -> String {
    match e {
        Entry::Step(s) => {
            let at = s.at.map(|a| format!("[{a}]")).unwrap_or_default();
            format!("{}  {:<4} {:<14} {:<24} → {}", t(s.t_ms), s.worker, s.op, at, s.result)
        }
        Entry::Blocked { t_ms, worker, op, by } => {
            format!("{}  {:<4} {:<14} {:<24} ⧗ blocked by {}", t(*t_ms), worker, op, "", by.join(", "))
        }
        Entry::Crash { t_ms, worker, at, op } => {
            let place = match (at, op) {
                (_, Some(op)) => format!("in the middle of `{op}`"),
                (Some(a), None) => format!("at {a}"),
                (None, None) => "between calls".to_string(),
            };
            format!("{}  {:<4} ✗ CRASH {place}", t(*t_ms), worker)
        }
        Entry::Restart { t_ms, worker } => format!("{}  {:<4} ↻ restart", t(*t_ms), worker),
        Entry::Fault { t_ms, what, .. } => format!("{}  ~    {what}", t(*t_ms)),
        Entry::Note { t_ms, worker, text } => format!("{}  {:<4}   · {text}", t(*t_ms), worker),
    }
}

/// Renders `history` as trace text, one line per entry, ending with a newline. In the drain
/// phase, polls that found nothing are left out and counted in a last line.
pub fn render(history: &History) -> String {
    let mut out = String::new();
    let hidden = idle_polls(history);
    for (i, e) in history.entries.iter().enumerate() {
        if !hidden.contains(&i) {
            let _ = writeln!(out, "{}", line(e));
        }
    }
    if !hidden.is_empty() {
        let _ = writeln!(out, "{:>9}   ({} idle polls of the drain phase not shown)", "", hidden.len());
    }
    out
}
