//! "Copies per identity stay bounded": a handler that sends a message it holds back to the
//! queue it took it from (a requeue, Messenger's retry with a delay) must delete the original
//! before it receives again or stops. Otherwise both the original, once its visibility ends or
//! it is released, and the copy are delivered, and each time it happens the copies of one
//! identity double (issue 15, graceful shutdown: a worker that "re-sends its unacknowledged
//! message as a new copy"). Duplicates may be harmless to the effect, but the queue fills with
//! them.
//!
//! Read from the history alone. A crash between the copy and the delete is at-least-once
//! delivery at work and is not reported.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::{CheckCx, CulpritKind, Invariant, Problem, Verdict};
use crate::duration::format_instant_ms;
use crate::sim::history::{Entry, Fact, Outcome};

/// The name of [`CopiesBounded`].
pub const COPIES_BOUNDED: &str = "copies per identity stay bounded: a handler that sends a message it holds back to its queue deletes the original";

/// Violated by every send of a handler, to queue `q`, of the identity of a message of `q` it
/// holds (received, not deleted since, not received by another worker since), when the
/// handler neither deletes a message of that identity before its next receive nor before a
/// graceful stop or the end of the history.
pub struct CopiesBounded;

/// A copy waiting for its original's delete.
struct Copy<'a> {
    worker: &'a str,
    identity: Uuid,
    queue: &'static str,
    copy: &'a str,
    original: &'a str,
    t_ms: u64,
    /// The send's index in the history's entries.
    at: usize,
}

impl Copy<'_> {
    fn problem(&self, cx: &CheckCx, when: &str) -> Problem {
        let text = format!(
            "{} sent {}, a copy of {} ({}, which it held), back to {} at {} and did not delete {} {when}: both are delivered",
            self.worker,
            self.copy,
            cx.label(&self.identity),
            self.original,
            self.queue,
            format_instant_ms(self.t_ms),
            self.original
        );
        Problem::new(text, CulpritKind::At(self.at), Some(self.identity))
    }
}

impl Invariant for CopiesBounded {
    fn name(&self) -> String {
        COPIES_BOUNDED.into()
    }

    fn check(&self, cx: &CheckCx) -> Verdict {
        let mut identity: BTreeMap<&str, Uuid> = BTreeMap::new();
        // The messages each worker holds, with their queue.
        let mut held: BTreeMap<&str, BTreeMap<&str, &'static str>> = BTreeMap::new();
        let mut pending: Vec<Copy> = Vec::new();
        let mut problems = Vec::new();
        for (i, e) in cx.history.entries.iter().enumerate() {
            match e {
                Entry::Step(s) => {
                    let w = s.worker.as_str();
                    let received = s.facts.iter().any(|f| matches!(f, Fact::Received { .. }));
                    if received {
                        problems.extend(pending.iter().filter(|c| c.worker == w).map(|c| c.problem(cx, "before its next receive")));
                        pending.retain(|c| c.worker != w);
                    }
                    let mut acked: BTreeSet<&str> = BTreeSet::new();
                    match &s.outcome {
                        Outcome::NotDeleted { msg } => {
                            acked.insert(msg);
                        }
                        Outcome::BatchDeleted { kept, .. } => acked.extend(kept.iter().map(String::as_str)),
                        _ => {}
                    }
                    for f in &s.facts {
                        match f {
                            Fact::Sent { queue, msg, identity: id } => {
                                identity.insert(msg, *id);
                                let original = held.get(w).and_then(|h| h.iter().find(|(m, q)| *q == queue && identity.get(*m) == Some(id)));
                                if let Some((original, _)) = original {
                                    pending.push(Copy { worker: w, identity: *id, queue, copy: msg, original, t_ms: s.t_ms, at: i });
                                }
                            }
                            Fact::Received { queue, msg, .. } => {
                                held.values_mut().for_each(|h| {
                                    h.remove(msg.as_str());
                                });
                                held.entry(w).or_default().insert(msg, queue);
                            }
                            Fact::Deleted { msg, .. } => {
                                acked.insert(msg);
                            }
                            _ => {}
                        }
                    }
                    for m in acked {
                        if let Some(id) = identity.get(m) {
                            pending.retain(|c| !(c.worker == w && c.identity == *id));
                        }
                        held.values_mut().for_each(|h| {
                            h.remove(m);
                        });
                    }
                }
                Entry::Fault { facts, .. } => {
                    for f in facts {
                        if let Fact::Sent { msg, identity: id, .. } = f {
                            identity.insert(msg, *id);
                        }
                    }
                }
                Entry::Crash { worker, graceful, .. } => {
                    if *graceful {
                        problems.extend(pending.iter().filter(|c| c.worker == worker).map(|c| c.problem(cx, "before it stopped")));
                    }
                    pending.retain(|c| c.worker != worker);
                    held.remove(worker.as_str());
                }
                _ => {}
            }
        }
        problems.extend(pending.iter().map(|c| c.problem(cx, "by the end")));
        Verdict::from_problems(COPIES_BOUNDED, problems)
    }
}
