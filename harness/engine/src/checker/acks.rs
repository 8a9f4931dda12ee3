//! "A failed acknowledgement is not ignored": a DeleteMessageBatch entry that failed while the
//! call returned HTTP 200 leaves its message in the queue; the worker must retry the delete,
//! hand the message back (ChangeMessageVisibility), or surface the failure (its handler
//! returns an error, which Messenger logs and counts) before it receives again. DeleteMessageBatch
//! API reference: "the result of the action on each message is reported individually in the
//! response … check for batch errors even when the call returns an HTTP status code of 200".
//!
//! An ignored failure is not a lost message: the message comes back after its visibility
//! timeout and a correct handler absorbs the duplicate. What it costs is a delivery the
//! worker counted as done: an extra receive that counts toward `maxReceiveCount`, so that a
//! message processed once can still end in the dead-letter queue, and an acknowledgement
//! bug that stays silent. Read from the history alone.

use std::collections::BTreeMap;

use super::{CheckCx, CulpritKind, Invariant, Problem, Verdict};
use crate::record::history::{Entry, Fact, Outcome};
use crate::sim::cx::HANDLER_ERROR;

/// The name of [`FailedAcksHandled`].
pub const FAILED_ACKS_HANDLED: &str = "no failed acknowledgement is ignored";

/// Violated by a worker that receives again while an entry of its DeleteMessageBatch failed
/// and it neither deleted that message since (a DeleteMessage that SQS answered OK counts, even
/// one that kept the message under `sqs:stale-delete-noop`), nor changed its visibility, nor
/// returned an error from its handler, nor crashed; also when it stops gracefully, or the
/// history ends, with it
/// unanswered. (Another worker receiving the message first proves nothing: the scheduler may
/// hold the worker before its retry past the visibility timeout.)
pub struct FailedAcksHandled;

/// A failed entry still unanswered: its message, SQS's code, the index of the failing call.
struct Pending<'h> {
    msg: &'h str,
    code: &'h str,
    at: usize,
}

impl Invariant for FailedAcksHandled {
    fn name(&self) -> String {
        FAILED_ACKS_HANDLED.into()
    }

    fn check(&self, cx: &CheckCx) -> Verdict {
        let mut pending: BTreeMap<&str, Vec<Pending>> = BTreeMap::new();
        let mut problems = Vec::new();
        for (i, e) in cx.history.entries.iter().enumerate() {
            match e {
                Entry::Step(s) => {
                    let w = s.worker.as_str();
                    if s.op == "recv" {
                        for p in pending.remove(w).unwrap_or_default() {
                            problems.push(ignored(w, &p, &format!("received again at {:.3}s", s.t_ms as f64 / 1000.0)));
                        }
                    }
                    if let Outcome::BatchDeleted { failed, .. } = &s.outcome {
                        let mine = pending.entry(w).or_default();
                        mine.extend(failed.iter().map(|(msg, code)| Pending { msg, code, at: i }));
                    }
                    // Deleted, handed back, or answered OK by a DeleteMessage that kept it.
                    let kept = match &s.outcome {
                        Outcome::NotDeleted { msg } => Some(msg),
                        _ => None,
                    };
                    let answered = s.facts.iter().filter_map(|f| match f {
                        Fact::Deleted { msg, .. } | Fact::VisibilityChanged { msg, .. } => Some(msg),
                        _ => None,
                    });
                    if let Some(mine) = pending.get_mut(w) {
                        for msg in answered.chain(kept) {
                            mine.retain(|p| p.msg != msg);
                        }
                    }
                }
                Entry::Note { worker, text, .. } if text.starts_with(HANDLER_ERROR) => {
                    pending.remove(worker.as_str());
                }
                Entry::Crash { worker, graceful: false, .. } => {
                    pending.remove(worker.as_str());
                }
                Entry::Crash { worker, graceful: true, t_ms, .. } => {
                    for p in pending.remove(worker.as_str()).unwrap_or_default() {
                        problems.push(ignored(worker, &p, &format!("stopped at {:.3}s", *t_ms as f64 / 1000.0)));
                    }
                }
                _ => {}
            }
        }
        for (w, mine) in &pending {
            for p in mine {
                problems.push(ignored(w, p, "never answered it"));
            }
        }
        Verdict::from_problems(FAILED_ACKS_HANDLED, problems)
    }
}

/// The problem of worker `w` that ignored failed entry `p`, and what it did instead (`then`).
fn ignored(w: &str, p: &Pending, then: &str) -> Problem {
    let text = format!(
        "{w} {then}, ignoring the failed delete of {} ({}): the message stays in the queue and is delivered again",
        p.msg, p.code
    );
    Problem::new(text, CulpritKind::At(p.at), [])
}
