//! The payout consumer with batches: up to `max_messages` messages per ReceiveMessage, each
//! handled in its own transaction, the handled ones deleted with one DeleteMessageBatch.
//!
//! Two rules of DeleteMessageBatch (its API reference) that a batch consumer must keep, each
//! with the mutant that breaks it:
//! - entry ids are distinct within a call, or SQS rejects the whole batch
//!   (`BatchEntryIdsNotDistinct`): the reference numbers the entries by position; a consumer
//!   that uses the message identity as the entry id fails on a duplicate delivery in one batch
//!   ([`EntryId::Identity`]);
//! - the call returns HTTP 200 with failed entries: the reference deletes each failed message
//!   again with DeleteMessage; a consumer that ignores them leaves messages it counted as
//!   acknowledged in the queue ([`OnFailed::Ignore`]).
//!
//! And a rule of graceful shutdown (`c1:stop`): a worker asked to stop finishes the message it
//! is on, releases the messages of the batch it has not started (ChangeMessageVisibility 0)
//! and deletes the ones it handled before it exits. A consumer that keeps the rest delays them
//! by a visibility timeout ([`OnStop::KeepPrefetched`]); one that exits with its
//! acknowledgements unsent has them redelivered ([`OnStop::DropAcks`]); one that sends them
//! back as new copies while the originals go back too doubles them ([`OnStop::ResendCopies`]).

use super::transaction::{handle, CONSUMER};
use super::{fail_or_retry, park, DispatchLock};
use crate::messages::PaymentCaptured;
use crate::points;
use crate::system::{CallError, Cx, Delivery};

/// How a batch consumer names its DeleteMessageBatch entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryId {
    /// `0`, `1`, …: distinct by construction (the reference).
    Position,
    /// The message identity (`event_id`): two deliveries of one event share it.
    Identity,
}

/// What a batch consumer does with the entries that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFailed {
    /// Deletes each again with DeleteMessage; an error there is returned (the reference).
    Retry,
    /// Goes on as if they were deleted.
    Ignore,
}

/// What a batch consumer asked to stop does with the messages it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStop {
    /// Releases the messages not started (visibility 0) and deletes the handled ones (the
    /// reference).
    Release,
    /// Deletes the handled ones and keeps the rest in flight until their visibility timeout.
    KeepPrefetched,
    /// Releases the messages not started and exits without deleting the handled ones.
    DropAcks,
    /// Sends each message not started back to its queue as a new copy (SendMessage of the same
    /// body), then releases the original too: both are delivered, and every stop adds copies.
    ResendCopies,
}

/// A batch consumer's acknowledgement policy.
#[derive(Debug, Clone, Copy)]
pub struct BatchAck {
    /// Entry ids.
    pub entry_id: EntryId,
    /// Failed entries.
    pub on_failed: OnFailed,
    /// A graceful stop in the middle of a batch.
    pub on_stop: OnStop,
}

/// The reference's policy: positions as entry ids, failed entries deleted again, a stop
/// releases what was not started and acknowledges what was handled.
pub const REFERENCE: BatchAck =
    BatchAck { entry_id: EntryId::Position, on_failed: OnFailed::Retry, on_stop: OnStop::Release };

/// Handles one receive's `deliveries`: each in its own transaction ([`handle`]); a handled one
/// stands at crash point `after_commit` and has its dispatch lock released; a failed one is
/// rolled back and retried or parked ([`fail_or_retry`]), a malformed one parked. An error, or
/// a stop asked during the receive or between two messages ([`Cx::stop_requested`]), ends the
/// loop: the rest are released (a call named `release` each) unless `ack.on_stop` keeps them. Then one DeleteMessageBatch of the handled ones
/// (crash point `after_delete` after it), and the failed entries as `ack` says. Errors: the
/// services', and the batch's rejection.
pub async fn handle_batch(cx: &mut Cx, deliveries: Vec<Delivery>, ack: BatchAck) -> Result<(), CallError> {
    let mut handled: Vec<(String, Delivery)> = Vec::new();
    let mut rest = deliveries.into_iter();
    let mut failure = None;
    // A stop asked during the receive or the message before: the rest are not started.
    while !cx.stop_requested() {
        let Some(d) = rest.next() else { break };
        cx.handling(&d);
        if let Err(e) = handle_one(cx, d, ack, &mut handled).await {
            failure = Some(e);
            break;
        }
    }
    // After an error or at a stop, the messages not started go back to the queue at once.
    if (failure.is_some() || cx.stop_requested()) && ack.on_stop != OnStop::KeepPrefetched {
        for d in rest {
            if ack.on_stop == OnStop::ResendCopies {
                resend_copy(cx, &d).await?;
            }
            cx.note(format!("{} not started: released for another consumer", d.msg));
            cx.change_visibility("release", &d, 0).await?;
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    if handled.is_empty() || (cx.stop_requested() && ack.on_stop == OnStop::DropAcks) {
        return Ok(());
    }
    let entries: Vec<(String, &Delivery)> = handled.iter().map(|(id, d)| (id.clone(), d)).collect();
    let failed = cx.delete_batch(&entries).await?;
    if ack.on_failed == OnFailed::Retry {
        for f in failed {
            cx.note(format!("{} not deleted ({}): deleting it again", f.delivery.msg, f.code));
            cx.delete(&f.delivery).await?;
        }
    }
    cx.crash_point(points::AFTER_DELETE);
    Ok(())
}

/// [`OnStop::ResendCopies`]: SendMessage of `d`'s body to its queue as a new message, with
/// the same identity (a call named `requeue`); a body without an `event_id` is not sent.
async fn resend_copy(cx: &mut Cx, d: &Delivery) -> Result<(), CallError> {
    let Ok(ev) = serde_json::from_str::<PaymentCaptured>(&d.body) else { return Ok(()) };
    let copy = cx.send("requeue", d.queue, &ev, ev.event_id).await?;
    cx.note(format!("{} not started: sent again as {copy}", d.msg));
    Ok(())
}

/// Handles one message of a batch: parked when malformed; else its transaction, and when it
/// committed its dispatch lock released and an entry added to `handled`; a failed one rolled
/// back and retried or parked. Errors: the services'.
async fn handle_one(
    cx: &mut Cx,
    d: Delivery,
    ack: BatchAck,
    handled: &mut Vec<(String, Delivery)>,
) -> Result<(), CallError> {
    let ev: PaymentCaptured = match serde_json::from_str(&d.body) {
        Ok(ev) => ev,
        Err(e) => return park(cx, CONSUMER, &d, &format!("malformed PaymentCaptured: {e}"), None).await,
    };
    let lock = DispatchLock::of(&ev);
    match handle(cx, &ev).await {
        Ok(_) => {
            cx.crash_point(points::AFTER_COMMIT);
            lock.release(cx).await?;
            let id = match ack.entry_id {
                EntryId::Position => handled.len().to_string(),
                EntryId::Identity => ev.event_id.to_string(),
            };
            handled.push((id, d));
            Ok(())
        }
        Err(e) => {
            cx.rollback().await?;
            fail_or_retry(cx, CONSUMER, &d, &e, Some(&lock)).await
        }
    }
}
