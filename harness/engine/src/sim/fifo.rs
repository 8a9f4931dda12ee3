//! FIFO queues' deduplication in logical time.
//!
//! SQS drops a send to a FIFO queue whose `MessageDeduplicationId` was accepted within the
//! last 5 minutes: the send succeeds but nothing is delivered, even if the first message was
//! received and deleted meanwhile (AWS SQS Developer Guide, "Exactly-once processing in Amazon
//! SQS"; `crashpoint doctor` probes it as `fifo-dedup-after-delete`). LocalStack keeps that
//! window in real time, which a schedule never spends; here it runs in logical time.
//!
//! Every send of one identity to one queue carries the identity as its deduplication id, with
//! a generation: inside the window the send repeats the id of the accepted one, so LocalStack
//! itself drops it; once the logical clock passes the window the next send gets the next
//! generation, so LocalStack accepts it as a new message. A nonce per schedule keeps a pooled
//! queue's real window from reaching into the next schedule. The message group is the
//! identity unless the sender names one ([`crate::sim::cx::Cx::send_in_group`]).

use std::collections::BTreeMap;

use uuid::Uuid;

/// SQS's deduplication interval for FIFO queues: 5 minutes, in ms.
pub const DEDUP_WINDOW_MS: u64 = 300_000;

/// A message that SQS accepted for an identity, which a send inside the window repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The message's label, e.g. `m1`.
    pub msg: String,
    /// When, logical ms since the schedule started.
    pub at_ms: u64,
}

/// What one send to a FIFO queue carries, and what the window says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FifoSend {
    /// `MessageGroupId`.
    pub group: String,
    /// `MessageDeduplicationId`: `<identity>.<generation>.<schedule nonce>` (at most 128
    /// characters, as SQS requires).
    pub dedup: String,
    /// `Some` when the identity was accepted less than [`DEDUP_WINDOW_MS`] ago: SQS will accept
    /// this send and drop it.
    pub inside: Option<Accepted>,
    identity: Uuid,
    generation: u32,
}

/// The accepted deduplication ids of one schedule, per queue and identity.
#[derive(Debug, Default)]
pub struct FifoDedup {
    nonce: String,
    /// The last accepted message of each (queue, identity), with its id's generation.
    accepted: BTreeMap<(&'static str, Uuid), (Accepted, u32)>,
    /// When each accepted FIFO message was accepted, logical ms, by label.
    accepted_at: BTreeMap<String, u64>,
    sends: u64,
}

impl FifoDedup {
    /// An empty record for a new schedule, with its own nonce.
    pub fn new() -> FifoDedup {
        FifoDedup { nonce: Uuid::new_v4().simple().to_string()[..12].to_string(), ..Default::default() }
    }

    /// The ids for sending `identity` to FIFO queue `queue` at logical `now_ms`, in message
    /// group `group` (the identity when `None`).
    pub fn prepare(&self, queue: &'static str, identity: Uuid, group: Option<&str>, now_ms: u64) -> FifoSend {
        let last = self.accepted.get(&(queue, identity));
        let inside = last.filter(|(a, _)| now_ms < a.at_ms + DEDUP_WINDOW_MS);
        let generation = match (inside, last) {
            (Some((_, g)), _) => *g,
            (None, Some((_, g))) => g + 1,
            (None, None) => 1,
        };
        let inside = inside.map(|(a, _)| a.clone());
        FifoSend {
            group: group.map_or_else(|| identity.to_string(), str::to_string),
            dedup: format!("{identity}.{generation}.{}", self.nonce),
            inside,
            identity,
            generation,
        }
    }

    /// A send without an identity (a replayed body the workload cannot place): ids used once.
    pub fn unique(&mut self, group: &str) -> FifoSend {
        self.sends += 1;
        FifoSend { group: group.to_string(), dedup: format!("unique.{}.{}", self.sends, self.nonce), inside: None, identity: Uuid::nil(), generation: 0 }
    }

    /// Records that SQS accepted a send to FIFO queue `queue` as new message `msg` at logical
    /// `now_ms`; with `send` (the ids the engine chose) the identity's window starts now (not
    /// called for a send SQS dropped: the window counts from the first acceptance).
    pub fn accepted(&mut self, queue: &'static str, send: Option<&FifoSend>, msg: &str, now_ms: u64) {
        self.accepted_at.insert(msg.to_string(), now_ms);
        if let Some(send) = send.filter(|s| s.generation > 0) {
            self.accepted.insert((queue, send.identity), (Accepted { msg: msg.to_string(), at_ms: now_ms }, send.generation));
        }
    }

    /// When message `msg` was accepted, logical ms; `None` for a message of a standard queue.
    pub fn accepted_at(&self, msg: &str) -> Option<u64> {
        self.accepted_at.get(msg).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window: the same id inside 5 min (SQS drops the send), the next generation at 5 min,
    /// and a window that counts from the accepted send, not from the dropped ones.
    #[test]
    fn the_window_runs_in_logical_time_from_the_accepted_send() {
        let mut d = FifoDedup::new();
        let id = Uuid::from_u128(7);
        let first = d.prepare("q", id, None, 0);
        assert!(first.inside.is_none());
        assert_eq!(first.group, id.to_string());
        d.accepted("q", Some(&first), "m1", 0);
        let again = d.prepare("q", id, None, DEDUP_WINDOW_MS - 1);
        assert_eq!(again.dedup, first.dedup);
        assert_eq!(again.inside.as_ref().map(|a| a.msg.as_str()), Some("m1"));
                let past = d.prepare("q", id, Some("p1"), DEDUP_WINDOW_MS);
        assert!(past.inside.is_none(), "the window counts from t = 0, not from the dropped send");
        assert_ne!(past.dedup, first.dedup);
        assert_eq!(past.group, "p1");
        d.accepted("q", Some(&past), "m2", DEDUP_WINDOW_MS);
        assert_eq!(d.accepted_at("m2"), Some(DEDUP_WINDOW_MS));
        assert_eq!(d.prepare("q", id, None, DEDUP_WINDOW_MS + 1).inside.map(|a| a.msg), Some("m2".to_string()));
        assert!(d.prepare("other", id, None, 1).inside.is_none(), "the window is per queue");
        assert!(FifoDedup::new().prepare("q", id, None, 0).dedup != first.dedup, "each schedule has its own nonce");
        assert!(first.dedup.len() <= 128);
        let (a, b) = (d.unique("g"), d.unique("g"));
        assert_ne!(a.dedup, b.dedup);
    }
}
