//! The logical clock: the one authority on time. It tracks visibility deadlines of in-flight
//! messages, the retention of every message not yet deleted, and the expiry of Redis keys (a
//! lock's TTL, any key's `EX`/`PX`/`EXPIRE`: [`crate::sim::model::redis`]), in logical ms, and says
//! which are due when time advances. Real services are configured with long timeouts; the
//! scheduler forces each due expiry (ChangeMessageVisibility to 0, DeleteMessage of a message
//! past its queue's retention, DEL of the key). A key without an expiry is never due.

use std::collections::BTreeMap;

use crate::record::history::{Expiry, Fact};


/// A message that was received and not yet deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    /// Its queue.
    pub queue: &'static str,
    /// The latest receipt handle.
    pub receipt: String,
    /// When it becomes visible again, logical ms.
    pub deadline_ms: u64,
    /// Order of registration, to break ties between equal deadlines deterministically.
    pub seq: u64,
}

/// Deadlines by message label and by lock key.
#[derive(Debug, Default)]
pub struct Clock {
    /// Logical now, ms.
    pub now_ms: u64,
    /// In-flight messages by label.
    pub in_flight: BTreeMap<String, InFlight>,
    /// Redis keys that are held locks or have an expiry, by key.
    pub keys: BTreeMap<String, Key>,
    /// Visibility timeout applied at receive, ms, by queue.
    pub visibility_ms: BTreeMap<&'static str, u64>,
    /// Messages sent and not deleted, by label: their queue and when their queue's retention
    /// deletes them (logical ms, from the send), with the order of registration.
    pub stored: BTreeMap<String, (&'static str, u64, u64)>,
    /// Message retention, ms, by queue (a queue not listed keeps messages forever).
    pub retention_ms: BTreeMap<&'static str, u64>,
    /// Registrations so far. Keys embed per-run UUIDs, so ties between equal deadlines are
    /// broken by registration order (which follows the history), never by key.
    seq: u64,
}

/// A Redis key the clock knows: a lock held ([`Fact::LockTaken`]), or a key with an expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// When it expires, logical ms; `None`: never (a lock taken without a TTL).
    pub deadline_ms: Option<u64>,
    /// Order of registration of its deadline.
    pub seq: u64,
    /// Whether it is a lock taken by `SET … NX` and not released since.
    pub lock: bool,
}

/// Something due at the new logical time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Due {
    /// A message's visibility timeout expired.
    Visibility { msg: String, queue: &'static str, receipt: String },
    /// A key's expiry passed; `lock` when it was a lock held.
    Key { key: String, lock: bool },
    /// A message outlived its queue's retention: SQS deletes it. `receipt` is the latest
    /// receipt handle when it was in flight.
    Retention { msg: String, queue: &'static str, receipt: Option<String> },
}

impl Clock {
    /// A clock at 0 with the given visibility timeouts (ms, by queue; a queue not listed
    /// gets SQS's default of 30 s) and message retentions (ms, by queue).
    pub fn new(visibility_ms: BTreeMap<&'static str, u64>, retention_ms: BTreeMap<&'static str, u64>) -> Clock {
        Clock { visibility_ms, retention_ms, ..Clock::default() }
    }

    /// Updates deadlines from a call's facts, at the current logical time.
    pub fn apply(&mut self, fact: &Fact) {
        match fact {
            Fact::Received { queue, msg, receipt, .. } => {
                self.seq += 1;
                let deadline_ms = self.now_ms.saturating_add(self.visibility_ms.get(queue).copied().unwrap_or(30_000));
                self.in_flight
                    .insert(msg.clone(), InFlight { queue, receipt: receipt.clone(), deadline_ms, seq: self.seq });
            }
            Fact::VisibilityChanged { msg, secs: 0, .. } => {
                // Visible at once: SQS was given 0 too, there is nothing left to expire.
                self.in_flight.remove(msg);
            }
            Fact::VisibilityChanged { msg, secs, .. } => {
                self.seq += 1;
                if let Some(f) = self.in_flight.get_mut(msg) {
                    f.deadline_ms = self.now_ms.saturating_add(secs.saturating_mul(1000));
                    f.seq = self.seq;
                }
            }
            Fact::Deleted { queue, msg } => {
                // Only on its queue: a label names one message on one queue (a moved message
                // gets a new label on its dead-letter queue), so a delete elsewhere is not it.
                if self.in_flight.get(msg).is_some_and(|f| f.queue == *queue) {
                    self.in_flight.remove(msg);
                }
                if self.stored.get(msg).is_some_and(|s| s.0 == *queue) {
                    self.stored.remove(msg);
                }
            }
            Fact::Sent { queue, msg, .. } => {
                if let Some(r) = self.retention_ms.get(queue) {
                    self.seq += 1;
                    self.stored.entry(msg.clone()).or_insert((*queue, self.now_ms.saturating_add(*r), self.seq));
                }
            }
            Fact::LockTaken { key, ttl_ms } => {
                self.seq += 1;
                let deadline_ms = ttl_ms.map(|t| self.now_ms.saturating_add(t));
                self.keys.insert(key.clone(), Key { deadline_ms, seq: self.seq, lock: true });
            }
            Fact::KeyWritten { key, expiry } => match expiry {
                Expiry::Keep => {}
                Expiry::Never => {
                    // Overwritten, persisted or deleted: a lock's key that is deleted is no
                    // lock any more (a release records LockReleased too).
                    self.keys.remove(key);
                }
                Expiry::In(ms) => {
                    self.seq += 1;
                    let deadline_ms = Some(self.now_ms.saturating_add(*ms));
                    let lock = self.keys.get(key).is_some_and(|k| k.lock);
                    self.keys.insert(key.clone(), Key { deadline_ms, seq: self.seq, lock });
                }
            },
            Fact::LockReleased { key, .. } | Fact::LockLost { key } => {
                self.keys.remove(key);
            }
            Fact::DependsOn { .. } | Fact::AutocommitWrite | Fact::Dispatched { .. } | Fact::DeleteFailed { .. } | Fact::Handling { .. } | Fact::Suppressed { .. } => {}
        }
    }

    /// Advances to `now_ms` and removes and returns what became due, ordered by deadline,
    /// then by order of registration.
    pub fn advance_to(&mut self, now_ms: u64) -> Vec<Due> {
        self.now_ms = self.now_ms.max(now_ms);
        let now = self.now_ms;
        let mut due: Vec<(u64, u64, Due)> = Vec::new();
        // Retention first: an expired message is gone, so its visibility does not expire.
        for (msg, (queue, at, seq)) in take_due(&mut self.stored, |s| s.1 <= now) {
            let receipt = self.in_flight.remove(&msg).map(|f| f.receipt);
            due.push((at, seq, Due::Retention { msg, queue, receipt }));
        }
        for (msg, f) in take_due(&mut self.in_flight, |f| f.deadline_ms <= now) {
            due.push((f.deadline_ms, f.seq, Due::Visibility { msg, queue: f.queue, receipt: f.receipt }));
        }
        for (key, k) in take_due(&mut self.keys, |k| k.deadline_ms.is_some_and(|d| d <= now)) {
            due.push((k.deadline_ms.unwrap_or(now), k.seq, Due::Key { key, lock: k.lock }));
        }
        due.sort_by_key(|(at, seq, _)| (*at, *seq));
        due.into_iter().map(|(_, _, d)| d).collect()
    }

    /// Moves stored message `msg` to dead-letter queue `to` as `copy`, keeping its enqueue time
    /// (a standard queue's move, AWS SQS Developer Guide, "Setting-up dead-letter queue
    /// retention"): `copy`'s retention ends at `msg`'s enqueue time plus `to`'s retention.
    /// Returns (enqueue time, new expiry), logical ms; `None` when `msg` is not stored (deleted
    /// or expired already).
    pub fn dead_lettered(&mut self, msg: &str, copy: &str, to: &'static str) -> Option<(u64, u64)> {
        let (from, deadline, _) = self.stored.remove(msg)?;
        self.in_flight.remove(msg);
        let enqueued = deadline.saturating_sub(self.retention_ms.get(from).copied().unwrap_or_default());
        let expires = enqueued.saturating_add(self.retention_ms.get(to).copied().unwrap_or_default());
        self.seq += 1;
        self.stored.insert(copy.to_string(), (to, expires, self.seq));
        Some((enqueued, expires))
    }

    /// The messages stored on queue `q` (sent, not deleted, not expired), in order of
    /// registration.
    pub fn stored_on(&self, q: &str) -> Vec<String> {
        let mut on: Vec<(&String, u64)> = self.stored.iter().filter(|(_, s)| s.0 == q).map(|(m, s)| (m, s.2)).collect();
        on.sort_by_key(|(_, seq)| *seq);
        on.into_iter().map(|(m, _)| m.clone()).collect()
    }

    /// Forgets message `msg`: it left its queue other than by a delete the history records
    /// (a redrive moved it as a new message).
    pub fn forget(&mut self, msg: &str) {
        self.stored.remove(msg);
        self.in_flight.remove(msg);
    }

    /// The latest expiry of a lock still held, if any (logical ms).
    pub fn last_lock_deadline(&self) -> Option<u64> {
        self.keys.values().filter(|k| k.lock).filter_map(|k| k.deadline_ms).max()
    }

    /// Forgets every key (Redis restarted without persistence); returns how many were held
    /// locks.
    pub fn forget_keys(&mut self) -> usize {
        std::mem::take(&mut self.keys).into_values().filter(|k| k.lock).count()
    }

    /// The earliest visibility deadline of an in-flight message, if any.
    pub fn next_visibility_deadline(&self) -> Option<u64> {
        self.in_flight.values().map(|f| f.deadline_ms).min()
    }
}

/// Removes from `map` and returns, in key order, the entries for which `is_due` holds.
fn take_due<V>(map: &mut BTreeMap<String, V>, is_due: impl Fn(&V) -> bool) -> Vec<(String, V)> {
    let keys: Vec<String> = map.iter().filter(|(_, v)| is_due(v)).map(|(k, _)| k.clone()).collect();
    keys.into_iter().filter_map(|k| map.remove_entry(&k)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_deadlines_come_due_in_registration_order_whatever_the_keys() {
        let mut c = Clock::new([("q", 30_000)].into(), BTreeMap::new());
        c.apply(&Fact::LockTaken { key: "zzz".into(), ttl_ms: Some(10_000) });
        c.apply(&Fact::LockTaken { key: "aaa".into(), ttl_ms: Some(10_000) });
        assert_eq!(c.advance_to(10_000), vec![Due::Key { key: "zzz".into(), lock: true }, Due::Key { key: "aaa".into(), lock: true }]);
    }

    #[test]
    fn a_key_without_an_expiry_survives_any_number_of_clock_moves() {
        let mut c = Clock::new([("q", 30_000)].into(), BTreeMap::new());
        c.apply(&Fact::LockTaken { key: "dedup".into(), ttl_ms: None });
        c.apply(&Fact::KeyWritten { key: "counter".into(), expiry: Expiry::Never });
        c.apply(&Fact::KeyWritten { key: "hash".into(), expiry: Expiry::Keep });
        for t in 1..=50u64 {
            assert!(c.advance_to(t * t * 86_400_000).is_empty(), "nothing is due at day {}", t * t);
        }
        assert_eq!(c.last_lock_deadline(), None, "a lock without a TTL has no deadline");
        assert_eq!(c.forget_keys(), 1, "the lock is still held");
    }

    #[test]
    fn a_keys_expiry_follows_the_last_command_that_set_or_cleared_it() {
        let mut c = Clock::new([("q", 30_000)].into(), BTreeMap::new());
        c.apply(&Fact::KeyWritten { key: "k".into(), expiry: Expiry::In(5_000) });
        c.apply(&Fact::KeyWritten { key: "k".into(), expiry: Expiry::Keep });
        assert_eq!(c.advance_to(5_000), vec![Due::Key { key: "k".into(), lock: false }], "INCR keeps the expiry");
        c.apply(&Fact::KeyWritten { key: "k".into(), expiry: Expiry::In(5_000) });
        c.apply(&Fact::KeyWritten { key: "k".into(), expiry: Expiry::Never });
        assert!(c.advance_to(100_000).is_empty(), "PERSIST or SET without an expiry clears it");
        c.apply(&Fact::LockTaken { key: "l".into(), ttl_ms: None });
        c.apply(&Fact::KeyWritten { key: "l".into(), expiry: Expiry::In(1_000) });
        assert_eq!(c.last_lock_deadline(), Some(101_000), "EXPIRE on a lock gives the lock a TTL");
        assert_eq!(c.advance_to(101_000), vec![Due::Key { key: "l".into(), lock: true }]);
    }

    #[test]
    fn a_lost_lock_expires_only_as_its_new_holder_took_it() {
        let mut c = Clock::new(BTreeMap::new(), BTreeMap::new());
        c.apply(&Fact::LockTaken { key: "l".into(), ttl_ms: Some(10_000) });
        assert!(c.advance_to(5_000).is_empty());
        // `redis:lose-lock`: the holder's lock goes and the asker takes it with its own TTL.
        c.apply(&Fact::LockLost { key: "l".into() });
        assert_eq!(c.last_lock_deadline(), None, "the lost lock is forgotten");
        c.apply(&Fact::LockTaken { key: "l".into(), ttl_ms: Some(10_000) });
        assert!(c.advance_to(10_000).is_empty(), "the first holder's deadline is gone");
        assert_eq!(c.advance_to(15_000), vec![Due::Key { key: "l".into(), lock: true }]);
    }

    #[test]
    fn expiries_come_due_in_deadline_order() {
        let mut c = Clock::new([("q", 30_000)].into(), BTreeMap::new());
        c.apply(&Fact::LockTaken { key: "k".into(), ttl_ms: Some(10_000) });
        c.apply(&Fact::Received { queue: "q", msg: "m1".into(), receive_count: 1, receipt: "r".into() });
        assert!(c.advance_to(9_999).is_empty());
        assert_eq!(c.advance_to(10_000), vec![Due::Key { key: "k".into(), lock: true }]);
        c.apply(&Fact::VisibilityChanged { queue: "q", msg: "m1".into(), secs: 5 });
        assert_eq!(c.next_visibility_deadline(), Some(15_000));
        let due = c.advance_to(40_000);
        assert_eq!(due, vec![Due::Visibility { msg: "m1".into(), queue: "q", receipt: "r".into() }]);
        c.apply(&Fact::Received { queue: "q", msg: "m1".into(), receive_count: 2, receipt: "r2".into() });
        c.apply(&Fact::Deleted { queue: "q", msg: "m1".into() });
        assert_eq!(c.next_visibility_deadline(), None);
    }

    #[test]
    fn a_message_not_deleted_within_its_queues_retention_comes_due_once_with_its_receipt() {
        let mut c = Clock::new([("q", 30_000)].into(), [("q", 345_600_000)].into());
        c.apply(&Fact::Sent { queue: "q", msg: "m1".into(), identity: uuid::Uuid::nil() });
        c.apply(&Fact::Sent { queue: "q", msg: "m2".into(), identity: uuid::Uuid::nil() });
        c.apply(&Fact::Deleted { queue: "q", msg: "m2".into() });
        c.advance_to(1_000);
        c.apply(&Fact::Received { queue: "q", msg: "m1".into(), receive_count: 1, receipt: "r".into() });
        let due = c.advance_to(345_599_999);
        assert_eq!(due, vec![Due::Visibility { msg: "m1".into(), queue: "q", receipt: "r".into() }]);
        c.apply(&Fact::Received { queue: "q", msg: "m1".into(), receive_count: 2, receipt: "r2".into() });
        assert_eq!(c.advance_to(345_600_000), vec![Due::Retention { msg: "m1".into(), queue: "q", receipt: Some("r2".into()) }]);
        assert_eq!(c.next_visibility_deadline(), None, "an expired message is no longer in flight");
        assert!(c.advance_to(2 * 345_600_000).is_empty());
    }

    #[test]
    fn a_dead_lettered_message_keeps_its_enqueue_time_and_a_redriven_one_is_forgotten() {
        let day = 86_400_000;
        let mut c = Clock::new([("q", 30_000)].into(), [("q", 4 * day), ("q-dlq", 4 * day)].into());
        c.advance_to(day);
        c.apply(&Fact::Sent { queue: "q", msg: "m1".into(), identity: uuid::Uuid::nil() });
        c.apply(&Fact::Sent { queue: "q", msg: "m2".into(), identity: uuid::Uuid::nil() });
        c.advance_to(2 * day);
        assert_eq!(c.dead_lettered("m1", "dlq1", "q-dlq"), Some((day, 5 * day)), "4 days from its first enqueue, not from the move");
        assert_eq!(c.dead_lettered("m9", "dlq9", "q-dlq"), None);
        c.apply(&Fact::Sent { queue: "q-dlq", msg: "dlq1".into(), identity: uuid::Uuid::nil() });
        c.apply(&Fact::Deleted { queue: "q", msg: "dlq1".into() });
        assert_eq!(c.stored_on("q-dlq"), vec!["dlq1".to_string()], "a delete on another queue keeps it");
        assert_eq!(c.stored_on("q"), vec!["m2".to_string()]);
        assert_eq!(c.advance_to(5 * day), vec![
            Due::Retention { msg: "m2".into(), queue: "q", receipt: None },
            Due::Retention { msg: "dlq1".into(), queue: "q-dlq", receipt: None },
        ]);
        c.apply(&Fact::Sent { queue: "q-dlq", msg: "dlq2".into(), identity: uuid::Uuid::nil() });
        c.forget("dlq2");
        assert!(c.stored_on("q-dlq").is_empty());
        assert!(c.advance_to(20 * day).is_empty());
    }
}
