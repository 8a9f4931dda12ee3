//! "No replay is suppressed": a replay (a message sent again from the failure transport, by
//! the workload's fault) is sent because its message needs handling again. To a FIFO queue,
//! inside the 5-minute deduplication window of the identity's last acceptance, SQS accepts
//! it and drops it (AWS SQS Developer Guide, "Exactly-once processing in Amazon SQS"): the
//! operator sees the replay succeed, and if no copy of the identity is still on its way the
//! message is never handled. Workers' own repeated sends (a producer's retry, a relay
//! publishing again after a crash) being dropped is what the window is for, and is not
//! reported; neither is a dropped replay whose identity a handler acknowledged afterwards
//! (the message it duplicated was still in the queue, or in flight under a crashed worker).

use std::collections::BTreeMap;

use uuid::Uuid;

use super::{CheckCx, CulpritKind, Invariant, Problem, Verdict};
use crate::duration::format_instant_ms;
use crate::record::history::{Entry, Fact};

/// The name of [`NoReplaySuppressed`].
pub const NO_REPLAY_SUPPRESSED: &str = "no replay is suppressed: FIFO deduplication dropped no message replayed from the failure transport";

/// Violated by every [`Fact::Suppressed`] with `replay` set after which no message of its
/// identity was deleted, naming the message whose deduplication id the replay repeated.
pub struct NoReplaySuppressed;

impl Invariant for NoReplaySuppressed {
    fn name(&self) -> String {
        NO_REPLAY_SUPPRESSED.into()
    }

    fn check(&self, cx: &CheckCx) -> Verdict {
        let mut identity: BTreeMap<&str, Uuid> = BTreeMap::new();
        // Dropped replays not followed (yet) by an acknowledgement of their identity.
        let mut dropped: Vec<(Uuid, String)> = Vec::new();
        for e in &cx.history.entries {
            let (facts, t_ms) = match e {
                Entry::Step(s) => (s.facts.as_slice(), s.t_ms),
                Entry::Fault { facts, t_ms, .. } => (facts.as_slice(), *t_ms),
                _ => continue,
            };
            for f in facts {
                match f {
                    Fact::Sent { msg, identity: id, .. } => {
                        identity.insert(msg, *id);
                    }
                    Fact::Deleted { msg, .. } => {
                        if let Some(id) = identity.get(msg.as_str()) {
                            dropped.retain(|(d, _)| d != id);
                        }
                    }
                    Fact::Suppressed { queue, msg, identity: id, replay: true } => {
                        let text = format!(
                            "the replay of {} to {queue} at {} was dropped: FIFO deduplication, {msg} had been accepted with the same MessageDeduplicationId less than 5 min before, and no copy of {} was handled after it",
                            cx.label(id),
                            format_instant_ms(t_ms),
                            cx.label(id)
                        );
                        dropped.push((*id, text));
                    }
                    _ => {}
                }
            }
        }
        let problems = dropped.into_iter().map(|(id, text)| Problem::new(text, CulpritKind::Missing, Some(id))).collect();
        Verdict::from_problems(NO_REPLAY_SUPPRESSED, problems)
    }
}
