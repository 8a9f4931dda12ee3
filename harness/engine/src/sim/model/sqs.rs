//! SQS as the harness models it, decided once for both front-ends: what a ReceiveMessage,
//! SendMessage, DeleteMessage, DeleteMessageBatch or ChangeMessageVisibility did under the armed
//! faults ([`crate::nemesis::sqs::SqsNemesis`]) and the world's state, and what the history
//! records of it. The in-process [`crate::sim::cx::Cx`] (the AWS SDK) and the wire proxy
//! ([`crate::sim::wire::sqs`], a worker's own SDK) each make the real call and hand the model
//! what SQS answered, as plain values; they build neither outcomes nor facts.
//!
//! The semantics, with their sources:
//! - A ReceiveMessage whose response is lost (`sqs:receive-lost`) loses every message it
//!   carried: SQS made each of them in flight and counted the receive when it answered, so each
//!   stays invisible for its visibility timeout whether or not the response reached the consumer
//!   (SQS Developer Guide, "Amazon SQS visibility timeout"). A response is one HTTP answer: it
//!   is lost as a whole, never message by message.
//! - A DeleteMessage with a stale receipt handle (the message was received again since) may
//!   return OK without deleting (DeleteMessage API reference): under `sqs:stale-delete-noop` it
//!   does, and the call is not made; otherwise the endpoint decides, and the step records that
//!   its outcome depends on that behaviour. A handle of an SQS message that a redelivery
//!   replaced deletes nothing (a receipt handle is "associated with a specific instance of
//!   receiving a message").
//! - A DeleteMessageBatch's entry ids must be distinct and well formed (`BatchEntryIdsNotDistinct`,
//!   `InvalidBatchEntryId`): SQS refuses such a request as a whole, before any entry.

use crate::nemesis::sqs::{BatchDeletePlan, STALE_RECEIPT_HANDLE};
use crate::record::history::{Fact, Outcome};
use crate::sim::world::World;

/// One message of a ReceiveMessage's answer, as the front-end read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Got {
    /// Its SQS `MessageId`.
    pub id: String,
    /// Its receipt handle.
    pub receipt: String,
    /// Its body.
    pub body: String,
    /// Its `ApproximateReceiveCount` attribute, when the receive asked for it.
    pub receive_count: Option<u32>,
}

/// One message of a receive, labelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// Its trace label (`m1`).
    pub msg: String,
    /// Its receipt handle.
    pub receipt: String,
    /// Its body.
    pub body: String,
    /// How many times SQS has returned it, this receive included.
    pub receive_count: u32,
}

/// What a ReceiveMessage did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The messages SQS returned, in its order.
    pub delivered: Vec<Delivered>,
    /// Whether the response is lost on its way (`sqs:receive-lost`): the consumer gets an
    /// empty answer, every message stays in flight.
    pub lost: bool,
    /// The step's outcome.
    pub outcome: Outcome,
    /// The step's facts: each message's `Received`, then its `VisibilityChanged` when the
    /// receive set a visibility timeout and the response was not lost.
    pub facts: Vec<Fact>,
}

/// A ReceiveMessage from `queue` (labels of `prefix`) that SQS answered with `got`;
/// `visibility`: the `VisibilityTimeout` the receive asked for, logical seconds. Labels the
/// messages, counts their receives, records their handles and bodies, and takes an armed
/// `sqs:receive-lost` when the answer carried a message.
pub fn receive(w: &mut World, queue: &'static str, prefix: &'static str, got: Vec<Got>, visibility: Option<u64>) -> Received {
    let mut delivered = Vec::with_capacity(got.len());
    for g in got {
        let msg = w.names.label(prefix, &g.id);
        let receive_count = w.count_receive(&msg, g.receive_count);
        w.sqs.note_received(queue, &msg, &g.receipt, &g.body);
        delivered.push(Delivered { msg, receipt: g.receipt, body: g.body, receive_count });
    }
    let lost = !delivered.is_empty() && w.sqs.take_receive_lost();
    let mut facts = Vec::new();
    for d in &delivered {
        facts.push(Fact::Received { queue, msg: d.msg.clone(), receive_count: d.receive_count, receipt: d.receipt.clone() });
        if let Some(secs) = visibility.filter(|_| !lost) {
            facts.push(Fact::VisibilityChanged { queue, msg: d.msg.clone(), secs });
        }
    }
    let outcome = match (delivered.as_slice(), lost) {
        ([], _) => Outcome::Empty,
        ([d], false) => Outcome::Received { msg: d.msg.clone(), receive_count: d.receive_count },
        ([d], true) => Outcome::ReceiveLost { msg: d.msg.clone(), receive_count: d.receive_count },
        (many, lost) => Outcome::ReceivedBatch { msgs: many.iter().map(|d| (d.msg.clone(), d.receive_count)).collect(), lost },
    };
    Received { delivered, lost, outcome, facts }
}

/// How a DeleteMessage of one message goes ([`plan_delete`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeletePlan {
    /// Not sent: answered OK and nothing deleted (a stale handle under `sqs:stale-delete-noop`).
    pub noop: bool,
    /// Sent, and its fate depends on the endpoint's stale-handle behaviour.
    pub depends: bool,
    /// Sent with a handle of an SQS message a redelivery replaced: it deletes nothing.
    pub gone: bool,
}

/// How a DeleteMessage of `msg` with `receipt` goes under the armed faults.
pub fn plan_delete(w: &World, msg: &str, receipt: &str) -> DeletePlan {
    DeletePlan {
        noop: w.sqs.is_stale(msg, receipt) && w.sqs.stale_delete_noop,
        depends: w.sqs.depends_on_stale_delete(msg, receipt),
        gone: w.sqs.is_gone(receipt),
    }
}

/// A DeleteMessage of `msg` in `queue` planned `plan` that SQS answered OK (or was not sent,
/// [`DeletePlan::noop`]): its outcome and facts; records the delete.
pub fn deleted(w: &mut World, queue: &'static str, msg: &str, plan: DeletePlan) -> (Outcome, Vec<Fact>) {
    if plan.noop || plan.gone {
        return (Outcome::NotDeleted { msg: msg.to_string() }, vec![]);
    }
    w.sqs.deleted(msg);
    let mut facts = vec![Fact::Deleted { queue, msg: msg.to_string() }];
    if plan.depends {
        facts.push(Fact::DependsOn { behaviour: STALE_RECEIPT_HANDLE.into() });
    }
    (Outcome::Deleted { msg: msg.to_string(), stale: plan.depends }, facts)
}

/// Whether SQS refuses a batch request with these entry ids as a whole: an id repeated, or one
/// that is not 1 to 80 characters of letters, digits, `-` and `_` (`BatchEntryIdsNotDistinct`,
/// `InvalidBatchEntryId`: DeleteMessageBatch API reference).
pub fn batch_ids_refused<'a>(ids: impl IntoIterator<Item = &'a str>) -> bool {
    let mut ids: Vec<&str> = ids.into_iter().collect();
    ids.sort_unstable();
    let well_formed = |id: &str| (1..=80).contains(&id.len()) && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    ids.windows(2).any(|p| p[0] == p[1]) || !ids.iter().all(|id| well_formed(id))
}

/// What a DeleteMessageBatch did, by entry index ([`batch_deleted`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchDeleted {
    /// The entries answered as successful, in request order: the deleted ones and those
    /// answered OK that deleted nothing.
    pub successful: Vec<usize>,
    /// The entries that failed, in request order, with SQS's code (or `InternalError` of
    /// `sqs:batch-delete-partial`).
    pub failed: Vec<(usize, String)>,
    /// The step's outcome.
    pub outcome: Outcome,
    /// The step's facts: the stale-handle dependencies, each `Deleted`, then each
    /// `DeleteFailed`.
    pub facts: Vec<Fact>,
}

/// A DeleteMessageBatch of `entries` ((message label, receipt handle), request order) in
/// `queue`, planned `plan` ([`crate::nemesis::sqs::SqsNemesis::plan_batch_delete`]), of whose
/// sent entries SQS answered `ok` successful and `refused` failed with a code (entry indexes):
/// which messages are deleted, kept (not sent, or a replaced message's handle) and failed.
/// Records the deletes.
pub fn batch_deleted(
    w: &mut World,
    queue: &'static str,
    entries: &[(String, String)],
    plan: &BatchDeletePlan,
    ok: Vec<usize>,
    refused: Vec<(usize, String)>,
) -> BatchDeleted {
    let mut facts: Vec<Fact> = (0..plan.depends).map(|_| Fact::DependsOn { behaviour: STALE_RECEIPT_HANDLE.into() }).collect();
    let mut successful = plan.kept.clone();
    successful.extend(ok.iter().copied().filter(|i| !plan.kept.contains(i)));
    successful.sort_unstable();
    let mut failed: Vec<(usize, String)> = plan.failed.map(|i| (i, "InternalError".to_string())).into_iter().collect();
    failed.extend(refused);
    failed.sort_unstable();
    let (mut deleted, mut kept) = (Vec::new(), plan.kept.clone());
    for &i in successful.iter().filter(|i| !plan.kept.contains(i)) {
        let (msg, receipt) = &entries[i];
        // A handle of a message a redelivery replaced: answered OK, nothing deleted.
        if w.sqs.is_gone(receipt) {
            kept.push(i);
            continue;
        }
        w.sqs.deleted(msg);
        facts.push(Fact::Deleted { queue, msg: msg.clone() });
        deleted.push(msg.clone());
    }
    facts.extend(failed.iter().map(|(i, _)| Fact::DeleteFailed { queue, msg: entries[*i].0.clone() }));
    let outcome = Outcome::BatchDeleted {
        deleted,
        kept: kept.iter().map(|i| entries[*i].0.clone()).collect(),
        failed: failed.iter().map(|(i, code)| (entries[*i].0.clone(), code.clone())).collect(),
    };
    BatchDeleted { successful, failed, outcome, facts }
}

/// What a SendMessage (or one entry of a SendMessageBatch) did ([`sent`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The accepted message's label: the new one's, or on a FIFO queue that dropped the send as
    /// a duplicate, the one accepted before.
    pub msg: String,
    /// The label of the identity it carries.
    pub who: String,
    /// When the message accepted before was accepted, logical ms, if SQS dropped the send.
    pub suppressed_since: Option<u64>,
    /// The step's fact: `Sent`, or `Suppressed`.
    pub fact: Fact,
}

impl Sent {
    /// The outcome of a SendMessage that did this.
    pub fn outcome(&self) -> Outcome {
        match self.suppressed_since {
            None => Outcome::Sent { msg: self.msg.clone(), who: self.who.clone() },
            Some(first_ms) => Outcome::Suppressed { msg: self.msg.clone(), who: self.who.clone(), first_ms },
        }
    }
}

/// A SendMessage to `queue` (labels of `prefix`) of a message whose identity is `identity`,
/// which SQS answered with `message_id`; `fifo`: the queue is FIFO, `prepared`: the
/// deduplication the engine chose (`None`: a worker's own, or none). On a FIFO queue an answer
/// naming a message SQS accepted before means SQS dropped the send as a duplicate (SendMessage
/// answers with the first message's id).
pub fn sent(
    w: &mut World,
    queue: &'static str,
    prefix: &'static str,
    message_id: &str,
    fifo: bool,
    prepared: Option<&crate::sim::fifo::FifoSend>,
    identity: uuid::Uuid,
) -> Sent {
    let who = w.names.uuid(&identity);
    match w.sent(queue, prefix, message_id, fifo, prepared) {
        Ok(msg) => Sent { fact: Fact::Sent { queue, msg: msg.clone(), identity }, msg, who, suppressed_since: None },
        Err(first) => Sent {
            fact: Fact::Suppressed { queue, msg: first.msg.clone(), identity, replay: false },
            msg: first.msg,
            who,
            suppressed_since: Some(first.at_ms),
        },
    }
}

/// A ChangeMessageVisibility that hid `msg` of `queue` for `secs` logical seconds (0: visible
/// at once): its outcome and facts.
pub fn hidden(queue: &'static str, msg: &str, secs: u64) -> (Outcome, Vec<Fact>) {
    (Outcome::Hidden { msg: msg.to_string(), secs }, vec![Fact::VisibilityChanged { queue, msg: msg.to_string(), secs }])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nemesis::sqs::SqsFault;

    fn got(id: &str, receipt: &str) -> Got {
        Got { id: id.into(), receipt: receipt.into(), body: "{}".into(), receive_count: None }
    }

    #[test]
    fn a_lost_receive_loses_every_message_of_its_response_and_takes_one_armed_fault() {
        let world = World::new(&[], Default::default());
        let mut w = world.borrow_mut();
        w.sqs.apply(SqsFault::ReceiveLost);
        let r = receive(&mut w, "q", "m", vec![got("a", "ra"), got("b", "rb")], Some(30));
        assert!(r.lost);
        assert_eq!(r.outcome, Outcome::ReceivedBatch { msgs: vec![("m1".into(), 1), ("m2".into(), 1)], lost: true });
        // Each message was received (in flight, counted); none had its visibility set.
        assert_eq!(r.facts.iter().filter(|f| matches!(f, Fact::Received { .. })).count(), 2);
        assert!(!r.facts.iter().any(|f| matches!(f, Fact::VisibilityChanged { .. })));
        // The fault is spent: the next receive arrives.
        let again = receive(&mut w, "q", "m", vec![got("a", "ra2")], None);
        assert_eq!(again.outcome, Outcome::Received { msg: "m1".into(), receive_count: 2 });
    }

    #[test]
    fn an_empty_receive_leaves_an_armed_loss_for_the_next_that_returns_a_message() {
        let world = World::new(&[], Default::default());
        let mut w = world.borrow_mut();
        w.sqs.apply(SqsFault::ReceiveLost);
        assert_eq!(receive(&mut w, "q", "m", vec![], None).outcome, Outcome::Empty);
        assert!(receive(&mut w, "q", "m", vec![got("a", "ra")], None).lost);
    }

    #[test]
    fn a_stale_handle_deletes_nothing_under_the_noop_fault_and_depends_on_the_endpoint_otherwise() {
        let world = World::new(&[], Default::default());
        let mut w = world.borrow_mut();
        receive(&mut w, "q", "m", vec![got("a", "r1")], None);
        receive(&mut w, "q", "m", vec![got("a", "r2")], None);
        let plan = plan_delete(&w, "m1", "r1");
        assert_eq!(plan, DeletePlan { noop: false, depends: true, gone: false });
        let (outcome, facts) = deleted(&mut w, "q", "m1", plan);
        assert_eq!(outcome, Outcome::Deleted { msg: "m1".into(), stale: true });
        assert_eq!(facts.len(), 2);
        w.sqs.apply(SqsFault::StaleDeleteNoop);
        receive(&mut w, "q", "m", vec![got("a", "r3")], None);
        let plan = plan_delete(&w, "m1", "r2");
        assert!(plan.noop);
        assert_eq!(deleted(&mut w, "q", "m1", plan), (Outcome::NotDeleted { msg: "m1".into() }, vec![]));
    }

    #[test]
    fn batch_ids_repeated_or_malformed_refuse_the_request() {
        assert!(!batch_ids_refused(["0", "1", "a-b_C"]));
        assert!(batch_ids_refused(["0", "0"]));
        assert!(batch_ids_refused(["a b"]));
        assert!(batch_ids_refused([""]));
        assert!(batch_ids_refused([&*"x".repeat(81)]));
    }

    #[test]
    fn a_partial_batch_delete_fails_its_last_entry_and_keeps_a_replaced_copys_handle() {
        let world = World::new(&[], Default::default());
        let mut w = world.borrow_mut();
        receive(&mut w, "q", "m", vec![got("a", "ra"), got("b", "rb"), got("c", "rc")], None);
        w.sqs.apply(SqsFault::BatchDeletePartial);
        w.sqs.gone.insert("rb".into());
        let entries: Vec<(String, String)> = [("m1", "ra"), ("m2", "rb"), ("m3", "rc")].iter().map(|(m, r)| (m.to_string(), r.to_string())).collect();
        let keys: Vec<(&str, &str)> = entries.iter().map(|(m, r)| (m.as_str(), r.as_str())).collect();
        let plan = w.sqs.plan_batch_delete(&keys, false);
        assert_eq!((plan.send.clone(), plan.failed), (vec![0, 1], Some(2)));
        let done = batch_deleted(&mut w, "q", &entries, &plan, vec![1, 0], vec![]);
        assert_eq!(done.successful, vec![0, 1]);
        assert_eq!(done.failed, vec![(2, "InternalError".to_string())]);
        assert_eq!(
            done.outcome,
            Outcome::BatchDeleted { deleted: vec!["m1".into()], kept: vec!["m2".into()], failed: vec![("m3".into(), "InternalError".into())] }
        );
    }
}
