//! "Nothing silently expired": SQS deletes a message that outlived its queue's
//! `MessageRetentionPeriod`, processed or not (AWS SQS Developer Guide, "Amazon SQS message
//! retention"; seed 000's failure window "replay at the retention edge"). A message whose
//! identity no copy had been acknowledged (deleted) for when retention removed it is lost, and
//! the verdict names the queue's retention.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::{CheckCx, CulpritKind, Invariant, Problem, Verdict};
use crate::duration::format_duration_ms;
use crate::sim::history::{Entry, Fact, FaultEvent};

/// The name of [`NothingExpired`].
pub const NOTHING_EXPIRED: &str = "nothing silently expired: no message outlived its queue's retention unprocessed";

/// Violated by every message that retention removed before any copy of its identity (a
/// message with the same identity, e.g. a redelivered or replayed one) was deleted by a
/// handler. A message deleted after its effect committed is not reported; one whose effect
/// committed but that nobody deleted is, since nothing in the history confirms it.
pub struct NothingExpired;

impl Invariant for NothingExpired {
    fn name(&self) -> String {
        NOTHING_EXPIRED.into()
    }

    fn check(&self, cx: &CheckCx) -> Verdict {
        let mut identity: BTreeMap<&str, Uuid> = BTreeMap::new();
        let mut acknowledged: BTreeSet<Uuid> = BTreeSet::new();
        let mut problems = Vec::new();
        for e in &cx.history.entries {
            let facts = match e {
                Entry::Step(s) => s.facts.as_slice(),
                Entry::Fault { facts, .. } => facts.as_slice(),
                _ => &[],
            };
            for f in facts {
                match f {
                    Fact::Sent { msg, identity: id, .. } => {
                        identity.insert(msg, *id);
                    }
                    Fact::Deleted { msg, .. } => {
                        acknowledged.extend(identity.get(msg.as_str()));
                    }
                    _ => {}
                }
            }
            // `found: false`: SQS no longer had it (deleted by a delete the history did not
            // see as such, e.g. with a stale receipt handle): nothing expired.
            if let Entry::Fault { fault: FaultEvent::Expired { msg, queue, retention_ms, found: true }, .. } = e {
                let id = identity.get(msg.as_str()).copied();
                if id.is_some_and(|id| acknowledged.contains(&id)) {
                    continue;
                }
                let of = id.map(|id| format!(" ({})", cx.label(&id))).unwrap_or_default();
                let text = format!(
                    "{msg}{of} on {queue} expired unprocessed: the queue's retention is {}",
                    format_duration_ms(*retention_ms)
                );
                problems.push(Problem::new(text, CulpritKind::Missing, id));
            }
        }
        Verdict::from_problems(NOTHING_EXPIRED, problems)
    }
}
