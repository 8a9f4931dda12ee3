//! "A lock is released only by its holder": a worker whose lock expired must not delete the
//! lock that another took since (Redis documentation, "Distributed locks with Redis": "remove
//! the key only if it exists and the value stored at the key is exactly the one I expect to
//! be"; the payout article's window "a Redis lock that expires while the first worker still runs").
//!
//! Read from the history alone. A release that proved it held the lock (a compare-and-delete
//! of its token: [`crate::sim::cx::Cx::unlock`], or an external worker's `EVAL` of such a
//! script) is by its holder by construction. A plain `DEL` that deleted a lock is by its holder
//! when the releaser took that lock itself, or handles a message sent under it (the producer's
//! dispatch lock travels with its message, as Symfony's DeduplicateStamp does, and the
//! consumer releases it). Otherwise it deleted someone else's lock.
//!
//! Messages are matched by label: a copy re-sent from a failure transport (`replay`) has a new
//! label and is not linked to the taking its original was sent under, and a worker handles the
//! message it received last. Both concern only plain `DEL`s, which correct systems do not use.

use std::collections::BTreeMap;

use super::{CheckCx, CulpritKind, Invariant, Problem, Verdict};
use crate::record::history::{Entry, Fact};

/// The name of [`ReleasedByHolder`].
pub const RELEASED_BY_HOLDER: &str = "a lock is released only by its holder";

/// One taking of a lock: who took it, when, and the messages sent under it.
struct Taking<'h> {
    worker: &'h str,
    t_ms: u64,
    sent: Vec<&'h str>,
}

/// Violated by every plain `DEL` that deleted a lock its worker neither took nor holds
/// through the message it handles.
pub struct ReleasedByHolder;

impl Invariant for ReleasedByHolder {
    fn name(&self) -> String {
        RELEASED_BY_HOLDER.into()
    }

    fn check(&self, cx: &CheckCx) -> Verdict {
        let mut takings: Vec<Taking> = Vec::new();
        let mut current: BTreeMap<&str, usize> = BTreeMap::new();
        // Takings of each worker since it began its current dispatch.
        let mut open: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        let mut handling: BTreeMap<&str, &str> = BTreeMap::new();
        let mut problems = Vec::new();
        for (i, e) in cx.history.entries.iter().enumerate() {
            let Entry::Step(s) = e else { continue };
            let w = s.worker.as_str();
            for f in &s.facts {
                match f {
                    Fact::Dispatched { .. } => open.entry(w).or_default().clear(),
                    Fact::LockTaken { key, .. } => {
                        takings.push(Taking { worker: w, t_ms: s.t_ms, sent: Vec::new() });
                        current.insert(key, takings.len() - 1);
                        open.entry(w).or_default().push(takings.len() - 1);
                    }
                    Fact::Sent { msg, .. } => {
                        for &t in open.get(w).into_iter().flatten() {
                            takings[t].sent.push(msg);
                        }
                    }
                    Fact::Received { msg, .. } => {
                        handling.insert(w, msg);
                    }
                    Fact::LockReleased { key, checked } => {
                        let Some(t) = current.remove(key.as_str()) else { continue };
                        let taking = &takings[t];
                        let msg = handling.get(w).copied();
                        if *checked || taking.worker == w || msg.is_some_and(|m| taking.sent.contains(&m)) {
                            continue;
                        }
                        let whose = match taking.sent.as_slice() {
                            [] => String::new(),
                            sent => format!(" for {}", sent.join(", ")),
                        };
                        let why = msg.map(|m| format!(", handling {m},")).unwrap_or_default();
                        let text = format!(
                            "{w}{why} released {} which {} took at {:.3}s{whose}",
                            cx.names.relabel(key),
                            taking.worker,
                            taking.t_ms as f64 / 1000.0,
                        );
                        problems.push(Problem::new(text, CulpritKind::At(i), []));
                    }
                    _ => {}
                }
            }
        }
        Verdict::from_problems(RELEASED_BY_HOLDER, problems)
    }
}
