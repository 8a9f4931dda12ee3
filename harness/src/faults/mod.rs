//! The nemesis: what the harness does to the world, beyond killing workers.
//!
//! Crashes, restarts and injected failures are applied by the scheduler at yield points;
//! expiries by the logical clock. This module holds the operator actions that touch the
//! services directly, such as replaying the failure transport (`messenger:failed:retry`), and
//! ([`sqs`]) the AWS behaviours LocalStack does not produce.

pub mod sqs;

use anyhow::Result;
use sqlx::Row;
use uuid::Uuid;

use crate::sim::admin::Admin;
use crate::sim::history::QueueRole;

/// The fault kinds a schedule can use, with their text form, for `crashpoint list`.
pub const KINDS: &[(&str, &str)] = &[
    ("<w>:crash", "kill worker <w> where it stands (a pod kill: sockets close, the transaction rolls back)"),
    ("<w>:crash@<point>", "run <w> to the named crash point, then kill it"),
    ("<w>:fail@<point>", "throw an error in <w>'s handler at the named crash point"),
    ("<w>:restart", "start a killed worker again with fresh software"),
    ("tick:<duration>", "advance the logical clock; due visibility timeouts and lock TTLs expire"),
    ("replay", "replay every message of the failure transport to its queue"),
    ("dispatch:<event>", "the producer dispatches an event once more"),
    ("redis:restart", "Redis restarts without persistence: every lock is lost"),
    ("sqs:stale-delete-noop", "from now on, DeleteMessage with a stale receipt handle returns OK and deletes nothing (AWS allows it)"),
    ("sqs:redeliver-after-delete", "the next message deleted is delivered once more (AWS at-least-once delivery)"),
    ("sqs:receive-lost", "the next message received is in flight and counted, but never reaches its consumer"),
];

/// One message sent back from the failure transport.
#[derive(Debug, Clone)]
pub struct Replayed {
    /// The queue it was sent to.
    pub queue: QueueRole,
    /// SQS MessageId of the new message.
    pub message_id: String,
    /// The message identity in the body.
    pub identity: Uuid,
    /// The reason it had been parked.
    pub reason: String,
}

/// The queue a message body belongs to and its message identity: `outbox_id` (a
/// MerchantPayoutCreated, payouts queue) or `event_id` (a PaymentCaptured, payments queue).
/// `None` when the body has neither.
pub fn identity_of(body: &serde_json::Value) -> Option<(QueueRole, Uuid)> {
    let (queue, key) = if body.get("outbox_id").is_some() {
        (QueueRole::Payouts, "outbox_id")
    } else {
        (QueueRole::Payments, "event_id")
    };
    body.get(key).and_then(|v| v.as_str()).and_then(|s| s.parse().ok()).map(|id| (queue, id))
}

/// Sends every `failed_message` row back to its queue (a body with `event_id` to payments,
/// one with `outbox_id` to payouts), oldest first, and deletes the rows.
pub fn replay_failure_transport(admin: &Admin) -> Result<Vec<Replayed>> {
    admin.rt.block_on(async {
        let rows = sqlx::query("DELETE FROM failed_message RETURNING id, body, reason").fetch_all(&admin.pg).await?;
        let mut rows: Vec<(i64, serde_json::Value, String)> = rows
            .into_iter()
            .map(|r| Ok((r.try_get("id")?, r.try_get("body")?, r.try_get("reason")?)))
            .collect::<Result<_, sqlx::Error>>()?;
        rows.sort_by_key(|r| r.0);
        let mut out = Vec::new();
        for (_, body, reason) in rows {
            let (queue, identity) = identity_of(&body).unwrap_or((QueueRole::Payments, Uuid::nil()));
            let sent = admin
                .sqs
                .send_message()
                .queue_url(admin.queue_url(queue))
                .message_body(body.to_string())
                .send()
                .await
                .map_err(|e| anyhow::anyhow!("replay SendMessage: {}", aws_sdk_sqs::error::DisplayErrorContext(&e)))?;
            out.push(Replayed { queue, message_id: sent.message_id.unwrap_or_default(), identity, reason });
        }
        Ok(out)
    })
}
