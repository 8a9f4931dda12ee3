//! The failure-transport replay (Messenger's `messenger:failed:retry`): a fault of the payout
//! workload's own, written `replay` in schedules.

use crashpoint::{Resend, WorkloadFault};
use sqlx::Row;
use uuid::Uuid;

use crate::queues;

/// The queue a message body belongs to and its message identity: `outbox_id` (a
/// MerchantPayoutCreated, payouts queue) or `event_id` (a PaymentCaptured, payments queue).
/// `None` when the body has neither.
pub fn identity_of(body: &serde_json::Value) -> Option<(&'static str, Uuid)> {
    let (queue, key) =
        if body.get("outbox_id").is_some() { (queues::PAYOUTS, "outbox_id") } else { (queues::PAYMENTS, "event_id") };
    body.get(key).and_then(|v| v.as_str()).and_then(|s| s.parse().ok()).map(|id| (queue, id))
}

/// `replay`: sends every `failed_message` row back to its queue (a body with `event_id` to
/// payments, one with `outbox_id` to payouts), oldest first, and deletes the rows.
pub struct Replay;

#[async_trait::async_trait(?Send)]
impl WorkloadFault for Replay {
    fn name(&self) -> &'static str {
        "replay"
    }

    fn about(&self) -> &'static str {
        "replay every message of the failure transport (failed_message) to its queue"
    }

    async fn apply(&self, pg: &sqlx::PgPool) -> anyhow::Result<Vec<Resend>> {
        let rows = sqlx::query("DELETE FROM failed_message RETURNING id, body, reason").fetch_all(pg).await?;
        let mut rows: Vec<(i64, serde_json::Value, String)> = rows
            .into_iter()
            .map(|r| Ok((r.try_get("id")?, r.try_get("body")?, r.try_get("reason")?)))
            .collect::<Result<_, sqlx::Error>>()?;
        rows.sort_by_key(|r| r.0);
        Ok(rows.into_iter().map(|(_, body, reason)| Resend { body, reason }).collect())
    }

    fn announce(&self, who: &str, msg: &str, r: &Resend) -> String {
        format!("replayed {who} from the failure transport as {msg} ({})", r.reason)
    }

    fn announce_nothing(&self) -> String {
        "replay: the failure transport is empty".into()
    }
}
