//! "No replay is suppressed": a replay (a message sent again from the failure transport, by
//! the workload's fault) is sent because its message needs handling again. To a FIFO queue,
//! inside the 5-minute deduplication window of the identity's first acceptance, SQS accepts
//! it and drops it (AWS SQS Developer Guide, "Exactly-once processing in Amazon SQS"): the
//! operator sees the replay succeed and nothing is handled. Workers' own repeated sends (a
//! producer's retry, a relay publishing again after a crash) being dropped is what the window
//! is for, and is not reported.

use super::{CheckCx, CulpritKind, Invariant, Problem, Verdict};
use crate::sim::history::{Entry, Fact};

/// The name of [`NoReplaySuppressed`].
pub const NO_REPLAY_SUPPRESSED: &str = "no replay is suppressed: FIFO deduplication dropped no message replayed from the failure transport";

/// Violated by every [`Fact::Suppressed`] with `replay` set, naming the message whose
/// deduplication id the replay repeated and when that one was accepted.
pub struct NoReplaySuppressed;

impl Invariant for NoReplaySuppressed {
    fn name(&self) -> String {
        NO_REPLAY_SUPPRESSED.into()
    }

    fn check(&self, cx: &CheckCx) -> Verdict {
        let mut problems = Vec::new();
        for e in &cx.history.entries {
            let Entry::Fault { facts, t_ms, .. } = e else { continue };
            for f in facts {
                if let Fact::Suppressed { queue, msg, identity, replay: true } = f {
                    let text = format!(
                        "the replay of {} to {queue} at {} was dropped: FIFO deduplication, {msg} had been accepted with the same MessageDeduplicationId less than 5 min before",
                        cx.label(identity),
                        crate::duration::format_instant_ms(*t_ms)
                    );
                    problems.push(Problem::new(text, CulpritKind::Missing, Some(*identity)));
                }
            }
        }
        Verdict::from_problems(NO_REPLAY_SUPPRESSED, problems)
    }
}
