use async_trait::async_trait;
use sqlx::Row;

use crate::sim::cx::Val;
use crate::sim::history::QueueRole;
use crate::sim::points::CrashPoint;
use crate::sut::messages::MerchantPayoutCreated;
use crate::sut::{CallError, Cx, Relay};

/// seed 000's outbox relay: in one transaction, `SELECT … FOR UPDATE SKIP LOCKED LIMIT n`,
/// SendMessage with the stable outbox id, set `published_at`, commit. At-least-once: a crash
/// after the send and before the commit republishes the row.
pub struct OutboxRelay;

/// The relay's select (seed 000): unpublished rows, oldest first, locked with
/// `FOR UPDATE SKIP LOCKED`, `LIMIT $1`.
pub const SELECT_UNPUBLISHED: &str = "SELECT id, aggregate_id, payload FROM outbox_event \
     WHERE published_at IS NULL AND next_attempt_at <= now() \
     ORDER BY created_at, id FOR UPDATE SKIP LOCKED LIMIT $1";

/// The `MerchantPayoutCreated` to publish for an outbox row of [`SELECT_UNPUBLISHED`]; its
/// identity is the outbox id.
pub fn publication(cx: &Cx, row: &sqlx::postgres::PgRow) -> Result<MerchantPayoutCreated, CallError> {
    let id: uuid::Uuid = row.try_get("id")?;
    let payload: serde_json::Value = row.try_get("payload")?;
    cx.label("ob", id);
    let field = |k: &str| payload.get(k).cloned().unwrap_or_default();
    Ok(MerchantPayoutCreated {
        outbox_id: id,
        payout_id: serde_json::from_value(field("payoutId")).unwrap_or_default(),
        payment_id: row.try_get("aggregate_id")?,
        merchant_id: serde_json::from_value(field("merchantId")).unwrap_or_default(),
        amount_minor: field("amount").as_i64().unwrap_or_default(),
        currency: field("currency").as_str().unwrap_or_default().to_string(),
    })
}

#[async_trait(?Send)]
impl Relay for OutboxRelay {
    async fn run_once(&self, cx: &mut Cx) -> Result<(), CallError> {
        cx.begin().await?;
        let rows = cx.fetch_all("select", SELECT_UNPUBLISHED, &[Val::I64(cx.config.relay_batch)]).await?;
        cx.idle(rows.is_empty());
        if rows.is_empty() {
            return cx.commit().await;
        }
        cx.crash_point(CrashPoint::RelayAfterSelect);
        for row in &rows {
            let event = publication(cx, row)?;
            cx.send("send", QueueRole::Payouts, &event, event.outbox_id).await?;
            cx.crash_point(CrashPoint::RelayAfterSend);
            cx.execute(
                "mark",
                "UPDATE outbox_event SET published_at = $2 WHERE id = $1",
                &[Val::Uuid(event.outbox_id), Val::Now],
            )
            .await?;
            cx.crash_point(CrashPoint::RelayAfterMark);
        }
        cx.commit().await
    }
}
