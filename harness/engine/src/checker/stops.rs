//! "A stopped worker holds no message": a handler stopped gracefully (`c1:stop`, SIGTERM to a
//! Messenger worker) must leave nothing in flight under its name. Messages it received and
//! will not handle (prefetched) are released with ChangeMessageVisibility 0, and messages it
//! handled are deleted before it exits; whatever it keeps stays invisible until its visibility
//! timeout, a delay the next consumer pays. The SQS Developer Guide ("Amazon SQS visibility
//! timeout"): a consumer that decides not to process a received message terminates its
//! visibility timeout by setting it to 0, so that other consumers can receive it at once.
//!
//! Read from the history alone. The delay is reported in logical time: from the stop to the
//! message's next receive (or "never received again" when the drain ended first).

use std::collections::BTreeMap;

use super::{CheckCx, CulpritKind, Invariant, Problem, Verdict};
use crate::record::history::{Entry, Fact};

/// The name of [`StoppedHoldsNothing`].
pub const STOPPED_HOLDS_NOTHING: &str = "a stopped worker holds no message";

/// Violated by every message still in flight under a worker when it stopped gracefully: it
/// received the message (a receive that reached it), and nobody deleted it or changed its
/// visibility since, no other worker received it since, and its handler did not return an
/// error after it began the message ([`crate::sim::cx::Cx::handling`]; such an error leaves
/// the message to its visibility timeout on purpose).
pub struct StoppedHoldsNothing;

impl Invariant for StoppedHoldsNothing {
    fn name(&self) -> String {
        STOPPED_HOLDS_NOTHING.into()
    }

    fn check(&self, cx: &CheckCx) -> Verdict {
        let entries = &cx.history.entries;
        // Messages in flight under each worker, by label, and whether it began to handle them.
        let mut holder: BTreeMap<&str, &str> = BTreeMap::new();
        let mut started: std::collections::BTreeSet<&str> = Default::default();
        let mut problems = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            match e {
                Entry::Step(s) => {
                    let lost = s.outcome.receive_lost();
                    for f in &s.facts {
                        match f {
                            Fact::Received { msg, .. } if !lost => {
                                holder.insert(msg, &s.worker);
                                started.remove(msg.as_str());
                            }
                            Fact::Handling { msg } => {
                                started.insert(msg);
                            }
                            Fact::Received { msg, .. } | Fact::Deleted { msg, .. } | Fact::VisibilityChanged { msg, .. } => {
                                holder.remove(msg.as_str());
                            }
                            _ => {}
                        }
                    }
                }
                // A handler that returned an error gave the messages it had begun up to their
                // visibility timeout on purpose (Messenger's redelivery); those it had not begun
                // are still its to release.
                Entry::Note { worker, text, .. } if text.starts_with(crate::sim::cx::HANDLER_ERROR) => {
                    holder.retain(|m, w| *w != worker.as_str() || !started.contains(m));
                }
                Entry::Crash { t_ms, worker, graceful, .. } => {
                    let held: Vec<&str> = holder.iter().filter(|(_, w)| **w == worker.as_str()).map(|(m, _)| *m).collect();
                    holder.retain(|_, w| *w != worker.as_str());
                    if !graceful {
                        continue;
                    }
                    for msg in held {
                        let again = entries[i..].iter().find_map(|e| match e {
                            Entry::Step(s) if s.facts.iter().any(|f| matches!(f, Fact::Received { msg: m, .. } if m == msg)) => Some(s.t_ms),
                            _ => None,
                        });
                        let delay = match again {
                            Some(t) => format!("received again {:.3}s later", t.saturating_sub(*t_ms) as f64 / 1000.0),
                            None => "never received again".to_string(),
                        };
                        let text = format!(
                            "{worker} stopped at {:.3}s holding {msg}, neither deleted nor released (visibility 0): it stayed invisible until its visibility timeout, {delay}",
                            *t_ms as f64 / 1000.0
                        );
                        problems.push(Problem::new(text, CulpritKind::At(i), []));
                    }
                }
                _ => {}
            }
        }
        Verdict::from_problems(STOPPED_HOLDS_NOTHING, problems)
    }
}
