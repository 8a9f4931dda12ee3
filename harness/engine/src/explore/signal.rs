//! The abstract coverage signal of a schedule: what its run did, in terms that
//! do not depend on timing, labels or ids, so that two schedules that drive the system the same
//! way give the same elements and a schedule that reaches a new situation gives a new one.
//!
//! Computed from the typed history alone, after the run. Its elements:
//! - `call <role> <call> <result>`: a call of a role's worker and how it came out (`ok`,
//!   `nothing` for an empty receive or a statement that found no row, `injected`, `error`);
//! - `crash <role> <where> <held>`: a worker killed at a crash point or in a call, with what it
//!   held then: a message received and not deleted (`msg`), an open transaction (`tx`), a lock
//!   taken and not released (`lock`);
//! - `inside <role>.<call> <role>.<call>`: a worker's call while another worker's transaction
//!   is open, with the other's last call (the interleavings races live in);
//! - `blocked <role>.<call> <role>`: a call that waited on another worker's lock;
//! - `contended <role>`: a worker of the role asked for a Redis lock that was held (what an
//!   armed `redis:lose-lock` waits for);
//! - `fault <kind>`: something the nemesis or the drain did (a clock jump, an expiry, a
//!   redelivery);
//! - `redelivered <role>`: a worker received a message for the second time or more;
//! - `twins <queue>`: two messages of one identity were on `queue` at once, neither deleted
//!   (a dispatch again past an expired lock, a copy `sqs:redeliver-after-delete` made): what
//!   a batch receive needs to take both together.
//!
//! A role is named by its prefix (`c`, not `c1`): workers of one role are interchangeable.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::record::history::{Entry, Fact, History, Outcome, Service, Step};
use crate::spec::{role_of, RoleSpec};

/// What one worker holds at a point of the history.
#[derive(Default, Clone)]
struct Held {
    /// Messages received and not deleted.
    msgs: BTreeSet<String>,
    /// Whether a transaction is open (a `begin` with no `commit` or `rollback` since).
    tx: bool,
    /// The last call it made.
    last: String,
    /// Locks taken and not released.
    locks: BTreeSet<String>,
}

fn result_of(o: &Outcome) -> &'static str {
    match o {
        Outcome::Injected { .. } | Outcome::ServiceErrorInjected { .. } => "injected",
        Outcome::Empty | Outcome::Fetched { n: 0 } | Outcome::Affected { n: 0 } | Outcome::Returned { row: false } => "nothing",
        Outcome::Locked { taken: false } | Outcome::Unlocked { held: false } => "nothing",
        Outcome::Error { .. } => "error",
        _ => "ok",
    }
}

/// The messages on each queue sent and not deleted, by identity.
#[derive(Default)]
struct Live {
    /// (queue, identity) → the labels of its messages not deleted.
    on: BTreeMap<(&'static str, Uuid), BTreeSet<String>>,
    /// Each message's queue and identity.
    of: BTreeMap<String, (&'static str, Uuid)>,
}

impl Live {
    /// Takes `f` in; `Some(queue)` when a message was sent to `queue` while another of its
    /// identity was there, not deleted. A nil identity (a body the workload reads none from)
    /// has no twins.
    fn take(&mut self, f: &Fact) -> Option<&'static str> {
        match f {
            Fact::Sent { queue, msg, identity } if !identity.is_nil() => {
                self.of.insert(msg.clone(), (queue, *identity));
                let on = self.on.entry((queue, *identity)).or_default();
                on.insert(msg.clone());
                (on.len() > 1).then_some(*queue)
            }
            Fact::Deleted { msg, .. } => {
                if let Some(key) = self.of.get(msg) {
                    self.on.entry(*key).or_default().remove(msg);
                }
                None
            }
            _ => None,
        }
    }
}

/// The signal elements of `history`, for a workload with `roles`.
pub fn signal(history: &History, roles: &[RoleSpec]) -> BTreeSet<String> {
    let role = |w: &str| role_of(roles, w).map_or_else(|| w.to_string(), |r| r.prefix.to_string());
    let mut out = BTreeSet::new();
    let mut held: BTreeMap<String, Held> = BTreeMap::new();
    let mut live = Live::default();
    for e in &history.entries {
        if let Entry::Step(Step { facts, .. }) | Entry::Fault { facts, .. } = e {
            for f in facts {
                if let Some(queue) = live.take(f) {
                    out.insert(format!("twins {queue}"));
                }
            }
        }
        match e {
            Entry::Step(s) => {
                let r = role(&s.worker);
                out.insert(format!("call {r} {} {}", s.op, result_of(&s.outcome)));
                if matches!(s.outcome, Outcome::Locked { taken: false }) {
                    out.insert(format!("contended {r}"));
                }
                if s.service == Service::Postgres {
                    for (w, h) in held.iter().filter(|(w, h)| **w != s.worker && h.tx) {
                        out.insert(format!("inside {}.{} {r}.{}", role(w), h.last, s.op));
                    }
                }
                // A lock lost to this call (before it took it) is no longer its holder's.
                for f in &s.facts {
                    if let Fact::LockLost { key } = f {
                        held.values_mut().for_each(|h| {
                            h.locks.remove(key);
                        });
                    }
                }
                let h = held.entry(s.worker.clone()).or_default();
                match s.op.as_str() {
                    "begin" => h.tx = true,
                    "commit" | "rollback" => h.tx = false,
                    _ => {}
                }
                h.last = s.op.clone();
                for f in &s.facts {
                    match f {
                        Fact::Received { msg, receive_count, .. } => {
                            h.msgs.insert(msg.clone());
                            if *receive_count > 1 {
                                out.insert(format!("redelivered {r}"));
                            }
                        }
                        Fact::Deleted { msg, .. } => {
                            h.msgs.remove(msg);
                        }
                        Fact::LockTaken { key, .. } => {
                            h.locks.insert(key.clone());
                        }
                        Fact::LockReleased { key, .. } => {
                            h.locks.remove(key);
                        }
                        _ => {}
                    }
                }
            }
            Entry::Crash { worker, at, op, graceful, .. } => {
                let h = held.remove(worker).unwrap_or_default();
                let place = at.map(str::to_string).or_else(|| op.clone()).unwrap_or_else(|| "idle".into());
                let mut what: Vec<&str> = Vec::new();
                if !h.msgs.is_empty() {
                    what.push("msg");
                }
                if h.tx {
                    what.push("tx");
                }
                if !h.locks.is_empty() {
                    what.push("lock");
                }
                let kind = if *graceful { "stop" } else { "crash" };
                out.insert(format!("{kind} {} {place} {}", role(worker), if what.is_empty() { "-".to_string() } else { what.join("+") }));
            }
            Entry::Blocked { worker, op, by, .. } => {
                for b in by {
                    out.insert(format!("blocked {}.{op} {}", role(worker), role(b)));
                }
            }
            Entry::Fault { fault, .. } => {
                let kind = serde_json::to_value(fault).ok().and_then(|v| v.get("fault").and_then(|k| k.as_str()).map(str::to_string));
                out.insert(format!("fault {}", kind.unwrap_or_default()));
            }
            Entry::Restart { worker, .. } => {
                held.remove(worker);
            }
            Entry::Note { .. } => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::Step;
    use crate::spec::RoleKind;

    fn lock(worker: &str, taken: bool, facts: Vec<Fact>) -> Entry {
        let outcome = Outcome::Locked { taken };
        Entry::Step(Step { t_ms: 0, worker: worker.into(), op: "lock".into(), service: Service::Redis, at: None, outcome, idle: false, facts, unit: None })
    }

    #[test]
    fn a_lock_asked_for_in_vain_is_contended_and_a_lost_lock_leaves_its_holder() {
        let roles = [RoleSpec { prefix: "p", kind: RoleKind::Producer, points: &[], about: "" }];
        let taken = |k: &str| Fact::LockTaken { key: k.into(), ttl_ms: None };
        let mut history = History::default();
        history.entries.push(lock("p1", true, vec![taken("k")]));
        assert!(!signal(&history, &roles).iter().any(|e| e.starts_with("contended")));
        history.entries.push(lock("p2", false, vec![]));
        assert!(signal(&history, &roles).contains("contended p"));
        // p2 takes the lock p1 held (`redis:lose-lock`); p1 then crashes holding no lock.
        history.entries.push(lock("p2", true, vec![Fact::LockLost { key: "k".into() }, taken("k")]));
        history.entries.push(Entry::Crash { t_ms: 0, worker: "p1".into(), at: None, op: None, graceful: false, exited: None });
        history.entries.push(Entry::Crash { t_ms: 0, worker: "p2".into(), at: None, op: None, graceful: false, exited: None });
        let s = signal(&history, &roles);
        assert!(s.contains("crash p idle -") && s.contains("crash p idle lock"), "{s:?}");
    }
}
