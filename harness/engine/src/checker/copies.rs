//! "Copies per identity stay bounded": a handler that sends a message it holds back to the
//! queue it took it from (a requeue, a retry sent as a delayed copy) must delete the original
//! before it receives again or stops. Otherwise both the original, once its visibility ends or
//! it is released, and the copy are delivered, and each time it happens the copies of one
//! identity double (graceful shutdown: a worker that "re-sends its unacknowledged
//! message as a new copy"). Duplicates may be harmless to the effect, but the queue fills with
//! them.
//!
//! Read from the history alone. A crash, or a failed call, between the copy and the delete is
//! at-least-once delivery at work and is not reported. No handler in this tree sends a copy
//! but the `stop-resends-copies` mutant; the stock Symfony demo retries with
//! ChangeMessageVisibility, and Messenger's envelope bodies carry no identity the workload can
//! read, so a team's Messenger retry by copy would not be matched.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::{CheckCx, CulpritKind, Invariant, Problem, Verdict};
use crate::duration::format_instant_ms;
use crate::record::history::{Entry, Fact, History, Outcome};

/// The name of [`CopiesBounded`].
pub const COPIES_BOUNDED: &str = "copies per identity stay bounded: a handler that sends a message it holds back to its queue deletes the original";

/// Violated by every send of a handler, to queue `q`, of the identity of a message of `q` it
/// holds (received, not deleted, released or received by another worker since), when the
/// handler does not delete that message (the original) before its next receive, its graceful
/// stop or the end of the history. Not reported: a crash or a failed call between the copy
/// and the delete, or the original received by another worker meanwhile (at-least-once
/// delivery in both cases), and bodies without an identity.
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
        let problems = undeleted(cx.history).into_iter().map(|(c, when)| c.problem(cx, when)).collect();
        Verdict::from_problems(COPIES_BOUNDED, problems)
    }
}

/// The copies in `history` whose original their sender did not delete, each with when that
/// was found: `before its next receive`, `before it stopped` or `by the end`.
fn undeleted(history: &History) -> Vec<(Copy<'_>, &'static str)> {
        let mut identity: BTreeMap<&str, Uuid> = BTreeMap::new();
        // The messages each worker holds, with their queue.
        let mut held: BTreeMap<&str, BTreeMap<&str, &'static str>> = BTreeMap::new();
        let mut pending: Vec<Copy> = Vec::new();
        let mut problems = Vec::new();
        for (i, e) in history.entries.iter().enumerate() {
            match e {
                Entry::Step(s) => {
                    let w = s.worker.as_str();
                    if s.facts.iter().any(|f| matches!(f, Fact::Received { .. })) {
                        let (found, rest): (Vec<Copy>, Vec<Copy>) = std::mem::take(&mut pending).into_iter().partition(|c| c.worker == w);
                        problems.extend(found.into_iter().map(|c| (c, "before its next receive")));
                        pending = rest;
                    }
                    // A call that failed after the copy (the delete of the original, say) leaves
                    // the original to its visibility timeout: at-least-once delivery, as a crash.
                    if s.outcome.failed() {
                        pending.retain(|c| c.worker != w);
                    }
                    // Deleted (from every worker's hands) or answered OK by a delete that kept it.
                    let mut deleted: BTreeSet<&str> = BTreeSet::new();
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
                            // A body without an identity (nil) is nobody's copy.
                            Fact::Sent { queue, msg, identity: id } if !id.is_nil() => {
                                identity.insert(msg, *id);
                                let mine = held.get(w).into_iter().flatten();
                                if let Some((original, _)) = mine.filter(|(m, q)| *q == queue && identity.get(**m) == Some(id)).min_by_key(|(m, _)| (m.len(), **m)) {
                                    pending.push(Copy { worker: w, identity: *id, queue, copy: msg, original, t_ms: s.t_ms, at: i });
                                }
                            }
                            Fact::Received { queue, msg, .. } => {
                                held.values_mut().for_each(|h| {
                                    h.remove(msg.as_str());
                                });
                                held.entry(w).or_default().insert(msg, queue);
                                // Its original now delivered to another worker: at-least-once
                                // delivery of it, not the copier's to delete any more.
                                pending.retain(|c| c.original != msg || c.worker == w);
                            }
                            Fact::Deleted { msg, .. } => {
                                deleted.insert(msg);
                            }
                            Fact::DeleteFailed { msg, .. } => {
                                pending.retain(|c| !(c.worker == w && c.original == msg));
                            }
                            Fact::VisibilityChanged { msg, secs: 0, .. } => {
                                if let Some(h) = held.get_mut(w) {
                                    h.remove(msg.as_str());
                                }
                            }
                            _ => {}
                        }
                    }
                    for m in deleted.iter().chain(&acked) {
                        pending.retain(|c| !(c.worker == w && c.original == *m));
                    }
                    for m in deleted {
                        held.values_mut().for_each(|h| {
                            h.remove(m);
                        });
                    }
                    if let Some(h) = held.get_mut(w) {
                        acked.iter().for_each(|m| {
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
                    let (found, rest): (Vec<Copy>, Vec<Copy>) = std::mem::take(&mut pending).into_iter().partition(|c| c.worker == worker);
                    if *graceful {
                        problems.extend(found.into_iter().map(|c| (c, "before it stopped")));
                    }
                    pending = rest;
                    held.remove(worker.as_str());
                }
                _ => {}
            }
        }
        problems.extend(pending.into_iter().map(|c| (c, "by the end")));
        problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::{Service, Step};

    const Q: &str = "payments";

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn step(worker: &str, op: &str, outcome: Outcome, facts: Vec<Fact>) -> Entry {
        Entry::Step(Step { t_ms: 0, worker: worker.into(), op: op.into(), service: Service::Sqs, at: None, outcome, idle: false, facts, unit: None })
    }

    fn sent(worker: &str, msg: &str, n: u128) -> Entry {
        step(worker, "send", Outcome::Sent { msg: msg.into(), who: String::new() }, vec![Fact::Sent { queue: Q, msg: msg.into(), identity: id(n) }])
    }

    fn recv(worker: &str, msg: &str) -> Entry {
        step(worker, "recv", Outcome::Empty, vec![Fact::Received { queue: Q, msg: msg.into(), receive_count: 1, receipt: String::new() }])
    }

    fn delete(worker: &str, msg: &str) -> Entry {
        step(worker, "delete", Outcome::Deleted { msg: msg.into(), stale: false }, vec![Fact::Deleted { queue: Q, msg: msg.into() }])
    }

    fn found(entries: Vec<Entry>) -> Vec<(String, &'static str)> {
        let h = History { entries, roles: Default::default() };
        undeleted(&h).into_iter().map(|(c, when)| (format!("{} {}→{}", c.worker, c.original, c.copy), when)).collect()
    }

    /// The rule and its exemptions: the copy counts only when its sender goes on without
    /// deleting the original; a crash, a failed call, the original delivered to another worker,
    /// a delete that kept it, or a body without identity are not reported.
    #[test]
    fn a_copy_counts_only_when_its_sender_goes_on_without_deleting_the_original() {
        let base = || vec![sent("p", "m1", 1), recv("c1", "m1"), sent("c1", "m2", 1)];
        let with = |more: Vec<Entry>| found(base().into_iter().chain(more).collect());
        assert_eq!(with(vec![recv("c1", "m3")]), vec![("c1 m1→m2".into(), "before its next receive")]);
        let stop = Entry::Crash { t_ms: 0, worker: "c1".into(), at: None, op: None, graceful: true, exited: None };
        assert_eq!(with(vec![stop]), vec![("c1 m1→m2".into(), "before it stopped")]);
        assert_eq!(with(vec![]), vec![("c1 m1→m2".into(), "by the end")]);
        // Messenger-style retry: the copy, then the original's delete.
        assert!(with(vec![delete("c1", "m1"), recv("c1", "m2")]).is_empty());
        let crash = Entry::Crash { t_ms: 0, worker: "c1".into(), at: None, op: None, graceful: false, exited: None };
        assert!(with(vec![crash, recv("c1", "m2")]).is_empty());
        let failed = step("c1", "delete", Outcome::Error { message: "DeleteMessage: boom".into() }, vec![]);
        assert!(with(vec![failed, recv("c1", "m3")]).is_empty());
        assert!(with(vec![recv("c2", "m1"), recv("c1", "m3")]).is_empty(), "m1 went to c2: its redelivery");
        let kept = step("c1", "delete", Outcome::NotDeleted { msg: "m1".into() }, vec![]);
        assert!(with(vec![kept, recv("c1", "m3")]).is_empty());
        // Another identity, or no identity, is no copy; a producer holds nothing.
        assert!(found(vec![sent("p", "m1", 1), recv("c1", "m1"), sent("c1", "m2", 2), recv("c1", "m3")]).is_empty());
        assert!(found(vec![sent("p", "m1", 0), recv("c1", "m1"), sent("c1", "m2", 0), recv("c1", "m3")]).is_empty());
        assert!(found(vec![sent("p", "m1", 1), sent("p", "m2", 1)]).is_empty());
        // The copy of a released message is not its sender's any more.
        let released = step("c1", "release", Outcome::Hidden { msg: "m1".into(), secs: 0 }, vec![Fact::VisibilityChanged { queue: Q, msg: "m1".into(), secs: 0 }]);
        assert!(found(vec![sent("p", "m1", 1), recv("c1", "m1"), released, sent("c1", "m2", 1), recv("c1", "m3")]).is_empty());
    }
}
