//! "Nothing silently expired": SQS deletes a message that outlived its queue's
//! `MessageRetentionPeriod`, processed or not (AWS SQS Developer Guide, "Amazon SQS message
//! retention"; the payout article's failure window "replay at the retention edge"). A message whose
//! identity no copy had been acknowledged (deleted) for when retention removed it is lost, and
//! the verdict names the queue's retention. On a dead-letter queue that retention counts from
//! the message's first enqueue on its source queue ("Setting-up dead-letter queue retention"),
//! and the verdict says so.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::{CheckCx, CulpritKind, Invariant, Problem, Verdict};
use crate::duration::{format_duration_ms, format_instant_ms};
use crate::record::history::{Entry, Fact, FaultEvent};

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
        let mut moved: BTreeMap<&str, (&str, &str, u64, u64)> = BTreeMap::new();
        let mut problems = Vec::new();
        for e in &cx.history.entries {
            if let Entry::Fault { t_ms, fault: FaultEvent::DeadLettered { msg, copy, from, enqueued_ms, .. }, .. } = e {
                moved.insert(copy, (msg, from, *enqueued_ms, *t_ms));
            }
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
                let mut text = format!(
                    "{msg}{of} on {queue} expired unprocessed: the queue's retention is {}",
                    format_duration_ms(*retention_ms)
                );
                if let Some((original, from, enqueued, at)) = moved.get(msg.as_str()) {
                    text += &format!(
                        ", counted from {original}'s enqueue on {from} at {}, not from its move to {queue} at {}",
                        format_instant_ms(*enqueued),
                        format_instant_ms(*at)
                    );
                }
                problems.push(Problem::new(text, CulpritKind::Missing, id));
            }
        }
        Verdict::from_problems(NOTHING_EXPIRED, problems)
    }
}
