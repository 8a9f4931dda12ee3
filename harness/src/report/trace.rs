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

/// Renders `history` as trace text, one line per entry, ending with a newline.
pub fn render(history: &History) -> String {
    let mut out = String::new();
    for e in &history.entries {
        let _ = match e {
            Entry::Step(s) => {
                let at = s.at.map(|a| format!("[{a}]")).unwrap_or_default();
                writeln!(out, "{}  {:<4} {:<14} {:<24} → {}", t(s.t_ms), s.worker, s.op, at, s.result)
            }
            Entry::Blocked { t_ms, worker, op, by } => {
                writeln!(out, "{}  {:<4} {:<14} {:<24} ⧗ blocked by {}", t(*t_ms), worker, op, "", by.join(", "))
            }
            Entry::Crash { t_ms, worker, at, op } => {
                let place = match (at, op) {
                    (_, Some(op)) => format!("in the middle of `{op}`"),
                    (Some(a), None) => format!("at {a}"),
                    (None, None) => "between calls".to_string(),
                };
                writeln!(out, "{}  {:<4} ✗ CRASH {place}", t(*t_ms), worker)
            }
            Entry::Restart { t_ms, worker } => writeln!(out, "{}  {:<4} ↻ restart", t(*t_ms), worker),
            Entry::Fault { t_ms, what, .. } => writeln!(out, "{}  ~    {what}", t(*t_ms)),
            Entry::Note { t_ms, worker, text } => writeln!(out, "{}  {:<4}   · {text}", t(*t_ms), worker),
        };
    }
    out
}
