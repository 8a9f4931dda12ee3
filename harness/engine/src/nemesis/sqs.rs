//! AWS behaviours that emulators do not produce, injected by the nemesis (issue: emulator
//! fidelity). LocalStack 4.13.1 deletes a message on DeleteMessage with a stale receipt handle,
//! never redelivers a deleted message and never loses a receive; AWS documents all three as
//! possible:
//!
//! | fault | text | what happens | AWS source |
//! |---|---|---|---|
//! | [`SqsFault::StaleDeleteNoop`] | `sqs:stale-delete-noop` | from then on, DeleteMessage with a receipt handle that is not the message's latest returns OK and deletes nothing | DeleteMessage API reference: with an older handle "the request succeeds, but the message might not be deleted" |
//! | [`SqsFault::RedeliverAfterDelete`] | `sqs:redeliver-after-delete` | the next message deleted from a standard queue is delivered once more (sent again with the same body, under the same label; a FIFO queue delivers exactly once) | SQS at-least-once delivery: "on rare occasions, one of the servers that stores a copy of a message might be unavailable when you receive or delete a message … you might get that message copy again" |
//! | [`SqsFault::ReceiveLost`] | `sqs:receive-lost` | the next ReceiveMessage that returns a message is lost on its way: the message is in flight and its receive count went up, but the consumer gets nothing | ReceiveMessage: a received message stays invisible for the visibility timeout whether or not the response reached the consumer |
//! | [`SqsFault::BatchDeletePartial`] | `sqs:batch-delete-partial` | the next DeleteMessageBatch returns HTTP 200 with its last entry in `Failed` (code `InternalError`): that message is not deleted | DeleteMessageBatch: "the result of the action on each message is reported individually in the response … check for batch errors even when the call returns an HTTP status code of 200" |
//! | [`SqsFault::Redrive`] | `sqs:redrive` | an operator redrives the dead-letter queues (`[config] dead_letter`): each message there goes back to its source queue as a new message (new MessageId, new enqueue time); drawn by exploration only when the scenario has a dead-letter queue, and the drain does it too | "Learn how to configure a dead-letter queue redrive": "the redrive task resets the retention period" |
//!
//! The harness knows each message's latest receipt handle (from its own receives), so it can
//! tell a stale DeleteMessage without asking SQS.

use std::collections::BTreeMap;
use std::fmt;

use anyhow::Result;



/// The calibration probe that a stale-handle DeleteMessage depends on.
pub const STALE_RECEIPT_HANDLE: &str = "stale-receipt-handle";

/// An AWS behaviour injected by the nemesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SqsFault {
    /// DeleteMessage with a stale receipt handle returns OK and does not delete.
    StaleDeleteNoop,
    /// A deleted message is delivered once more.
    RedeliverAfterDelete,
    /// A receive counts against the message but the consumer never gets it.
    ReceiveLost,
    /// One entry of a DeleteMessageBatch fails while the call succeeds.
    BatchDeletePartial,
    /// An operator's dead-letter queue redrive, applied at once by the scheduler
    /// ([`crate::spec::DeadLetter`]).
    Redrive,
}

impl SqsFault {
    /// The faults exploration draws (`[explore] sqs_faults`), in text order; it adds
    /// [`SqsFault::Redrive`] when the scenario has a dead-letter queue.
    pub const ALL: [SqsFault; 4] =
        [SqsFault::StaleDeleteNoop, SqsFault::RedeliverAfterDelete, SqsFault::ReceiveLost, SqsFault::BatchDeletePartial];
    /// Every `sqs:` decision a schedule may name: [`SqsFault::ALL`] and [`SqsFault::Redrive`].
    pub const NAMED: [SqsFault; 5] = [
        SqsFault::StaleDeleteNoop,
        SqsFault::RedeliverAfterDelete,
        SqsFault::ReceiveLost,
        SqsFault::BatchDeletePartial,
        SqsFault::Redrive,
    ];

    /// The name after `sqs:` in schedules, e.g. `stale-delete-noop`.
    pub fn as_str(self) -> &'static str {
        match self {
            SqsFault::StaleDeleteNoop => "stale-delete-noop",
            SqsFault::RedeliverAfterDelete => "redeliver-after-delete",
            SqsFault::ReceiveLost => "receive-lost",
            SqsFault::BatchDeletePartial => "batch-delete-partial",
            SqsFault::Redrive => "redrive",
        }
    }

    /// Parses the name after `sqs:`. Errors list the names.
    pub fn parse(s: &str) -> Result<SqsFault, String> {
        super::parse_named(&SqsFault::NAMED, SqsFault::as_str, "sqs", "an SQS fault", s)
    }

    /// What the nemesis says in the trace when the schedule applies it.
    pub fn announcement(self) -> &'static str {
        match self {
            SqsFault::StaleDeleteNoop => {
                "sqs:stale-delete-noop on: DeleteMessage with a stale receipt handle returns OK and deletes nothing (as AWS allows)"
            }
            SqsFault::RedeliverAfterDelete => "sqs:redeliver-after-delete armed: the next message deleted is delivered once more",
            SqsFault::ReceiveLost => "sqs:receive-lost armed: the next message received never reaches its consumer",
            SqsFault::BatchDeletePartial => {
                "sqs:batch-delete-partial armed: the last entry of the next DeleteMessageBatch fails (InternalError) while the call succeeds"
            }
            SqsFault::Redrive => "sqs:redrive: every message on a dead-letter queue goes back to its source queue as a new message",
        }
    }
}

impl fmt::Display for SqsFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sqs:{}", self.as_str())
    }
}

/// A DeleteMessageBatch's entries under the armed faults ([`SqsNemesis::plan_batch_delete`]),
/// as indexes into the request's entries.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BatchDeletePlan {
    /// Sent to SQS.
    pub send: Vec<usize>,
    /// Answered as deleted without being sent (a stale handle under `stale-delete-noop`).
    pub kept: Vec<usize>,
    /// Not sent, answered as failed with `InternalError` (`batch-delete-partial`).
    pub failed: Option<usize>,
    /// How many of `send` decide their message's fate on the stale-receipt behaviour.
    pub depends: usize,
}

/// The SQS nemesis' state within one schedule, shared by the workers' contexts and the
/// scheduler.
#[derive(Debug, Default)]
pub struct SqsNemesis {
    /// `sqs:stale-delete-noop` is on.
    pub stale_delete_noop: bool,
    /// Deletes still to be followed by a redelivery.
    pub redeliver_after_delete: u32,
    /// Receives still to be lost.
    pub receive_lost: u32,
    /// DeleteMessageBatch calls still to fail one entry.
    pub batch_delete_partial: u32,
    /// Each message's latest receipt handle, by label.
    pub latest_receipt: BTreeMap<String, String>,
    /// Each received message's queue and body, by label (for a redelivery).
    pub bodies: BTreeMap<String, (&'static str, String)>,
    /// Messages deleted since their last receive, by label.
    pub deleted: std::collections::BTreeSet<String>,
    /// The receipt handles of the SQS message each label names now, by label.
    pub receipts: BTreeMap<String, Vec<String>>,
    /// Receipt handles of SQS messages that are gone and whose label now names a redelivered
    /// copy (`sqs:redeliver-after-delete` sends a new SQS message under the deleted one's
    /// label): a DeleteMessage with one of them answers OK and deletes nothing, on every
    /// endpoint, since the message it names was deleted already and the copy has handles of
    /// its own (a receipt handle is "associated with a specific instance of receiving a
    /// message", DeleteMessage API reference).
    pub gone: std::collections::BTreeSet<String>,
}

impl SqsNemesis {
    /// Applies `fault` from a schedule decision.
    pub fn apply(&mut self, fault: SqsFault) {
        match fault {
            SqsFault::StaleDeleteNoop => self.stale_delete_noop = true,
            SqsFault::RedeliverAfterDelete => self.redeliver_after_delete += 1,
            SqsFault::ReceiveLost => self.receive_lost += 1,
            SqsFault::BatchDeletePartial => self.batch_delete_partial += 1,
            // Applied by the scheduler at once: it moves messages, it arms nothing.
            SqsFault::Redrive => {}
        }
    }

    /// One-shot faults armed and not yet fired (`sqs:stale-delete-noop` is a mode, not
    /// counted).
    pub fn armed(&self) -> u32 {
        self.redeliver_after_delete + self.receive_lost + self.batch_delete_partial
    }

    /// Records that `msg` was received with `receipt` (one message of a receive).
    pub fn note_received(&mut self, queue: &'static str, msg: &str, receipt: &str, body: &str) {
        self.latest_receipt.insert(msg.to_string(), receipt.to_string());
        self.receipts.entry(msg.to_string()).or_default().push(receipt.to_string());
        self.deleted.remove(msg);
        self.bodies.insert(msg.to_string(), (queue, body.to_string()));
    }

    /// Takes an armed `receive-lost` for a receive that returned messages: true when the
    /// whole response is to be lost.
    pub fn take_receive_lost(&mut self) -> bool {
        take(&mut self.receive_lost)
    }

    /// Takes an armed `batch-delete-partial` for a DeleteMessageBatch: true when its last entry
    /// is to fail.
    pub fn take_batch_delete_partial(&mut self) -> bool {
        take(&mut self.batch_delete_partial)
    }

    /// How a DeleteMessageBatch of `entries` ((message label, receipt handle), in request
    /// order) goes under the armed faults: with `sqs:stale-delete-noop`, an entry with a stale
    /// handle succeeds without being sent (`kept`); with `sqs:batch-delete-partial` (taken
    /// here) the last entry to send is not sent and fails (`failed`); the rest is sent.
    /// `rejected`: SQS refuses the request as a whole (repeated or malformed entry ids), so it
    /// goes as it is, with no fault applied. The same plan for in-process and wire workers.
    pub fn plan_batch_delete(&mut self, entries: &[(&str, &str)], rejected: bool) -> BatchDeletePlan {
        let mut plan = BatchDeletePlan::default();
        for (i, (msg, receipt)) in entries.iter().enumerate() {
            if !rejected && self.is_stale(msg, receipt) && self.stale_delete_noop {
                plan.kept.push(i);
            } else {
                plan.send.push(i);
            }
        }
        if !rejected && !plan.send.is_empty() && self.take_batch_delete_partial() {
            plan.failed = plan.send.pop();
        }
        plan.depends = plan.send.iter().filter(|i| self.depends_on_stale_delete(entries[**i].0, entries[**i].1)).count();
        plan
    }

    /// Whether `receipt` is not the latest handle of `msg`.
    pub fn is_stale(&self, msg: &str, receipt: &str) -> bool {
        self.latest_receipt.get(msg).is_some_and(|latest| latest != receipt)
    }

    /// Whether a DeleteMessage of `msg` with `receipt` decides the message's fate on a
    /// behaviour endpoints differ on: the handle is stale, not [`SqsNemesis::is_gone`], and the
    /// message not yet deleted.
    pub fn depends_on_stale_delete(&self, msg: &str, receipt: &str) -> bool {
        self.is_stale(msg, receipt) && !self.is_gone(receipt) && !self.deleted.contains(msg)
    }

    /// Whether `receipt` names an SQS message that a redelivery replaced: deleting with it
    /// deletes nothing ([`SqsNemesis::gone`]).
    pub fn is_gone(&self, receipt: &str) -> bool {
        self.gone.contains(receipt)
    }

    /// Records that label `msg` now names a new SQS message (a redelivered copy): the handles
    /// of the one before are [`SqsNemesis::gone`].
    pub fn replaced(&mut self, msg: &str) {
        self.gone.extend(self.receipts.remove(msg).unwrap_or_default());
    }

    /// Records a DeleteMessage that deleted `msg`.
    pub fn deleted(&mut self, msg: &str) {
        self.deleted.insert(msg.to_string());
    }

    /// Takes an armed redelivery for a message just deleted: its queue and body.
    pub fn take_redelivery(&mut self, msg: &str) -> Option<(&'static str, String)> {
        if self.redeliver_after_delete == 0 {
            return None;
        }
        let found = self.bodies.get(msg).cloned();
        if found.is_some() {
            self.redeliver_after_delete -= 1;
        }
        found
    }
}

/// Takes one of `armed` faults: true when one was armed.
fn take(armed: &mut u32) -> bool {
    let was = *armed > 0;
    *armed = armed.saturating_sub(1);
    was
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_names_list_the_choices() {
        for f in SqsFault::NAMED {
            assert_eq!(SqsFault::parse(f.as_str()), Ok(f));
        }
        let e = SqsFault::parse("drop").unwrap_err();
        assert!(e.contains("sqs:receive-lost"), "{e}");
    }

    /// A redelivery makes the handles of the deleted message gone: a delete with one of them
    /// deletes nothing, whatever the endpoint, so it depends on no endpoint behaviour; the
    /// copy's own handles are not gone.
    #[test]
    fn handles_of_a_replaced_message_are_gone() {
        let mut n = SqsNemesis::default();
        n.note_received("q", "m1", "h1", "{}");
        n.note_received("q", "m1", "h2", "{}");
        assert!(!n.is_gone("h1") && !n.is_gone("h2"));
        n.deleted("m1");
        n.replaced("m1");
        assert!(n.is_gone("h1") && n.is_gone("h2"));
        n.note_received("q", "m1", "h3", "{}");
        assert!(!n.is_gone("h3"));
        assert!(n.is_stale("m1", "h2") && !n.depends_on_stale_delete("m1", "h2"), "a gone handle decides nothing");
        n.note_received("q", "m1", "h4", "{}");
        assert!(n.depends_on_stale_delete("m1", "h3"), "a stale handle of the copy still depends on the endpoint");
    }

    #[test]
    fn stale_handles_and_armed_faults() {
        let mut n = SqsNemesis::default();
        n.note_received("q", "m1", "h1", "{}");
        assert!(!n.take_receive_lost() && !n.is_stale("m1", "h1"));
        n.apply(SqsFault::ReceiveLost);
        n.note_received("q", "m1", "h2", "{}");
        assert!(n.take_receive_lost(), "the armed receive is lost");
        n.note_received("q", "m1", "h3", "{}");
        assert!(!n.take_receive_lost(), "only once");
        assert!(n.is_stale("m1", "h1") && n.is_stale("m1", "h2") && !n.is_stale("m1", "h3"));
        assert_eq!(n.take_redelivery("m1"), None, "not armed");
        n.apply(SqsFault::RedeliverAfterDelete);
        assert_eq!(n.take_redelivery("m1"), Some(("q", "{}".into())));
        assert_eq!(n.take_redelivery("m1"), None);
    }
}
