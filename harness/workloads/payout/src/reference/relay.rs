use async_trait::async_trait;
use sqlx::Row;

use crate::messages::MerchantPayoutCreated;
use crate::points;
use crate::queues;
use crate::system::{CallError, Cx, Relay};
use crashpoint::Val;

/// the payout article's outbox relay: in one transaction, `SELECT … FOR UPDATE SKIP LOCKED LIMIT n`,
/// SendMessage with the stable outbox id, set `published_at`, commit. At-least-once: a crash
/// after the send and before the commit republishes the row.
pub struct OutboxRelay;

/// The relay's select (the payout article): unpublished rows due by `$2`, the logical now (not
/// PostgreSQL's `now()`, which is wall time: every time a schedule decides comes from the
/// logical clock), oldest first, locked with `FOR UPDATE SKIP LOCKED`, `LIMIT $1`.
pub const SELECT_UNPUBLISHED: &str = "SELECT id, aggregate_id, payload FROM outbox_event \
     WHERE published_at IS NULL AND next_attempt_at <= $2 \
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

/// Opens the relay's transaction and selects a batch ([`SELECT_UNPUBLISHED`], a yield point
/// named `select`). With nothing to publish it commits, marks the worker idle and returns
/// `None`; otherwise it passes crash point `relay_after_select` and returns the publications,
/// their rows still locked by the open transaction.
pub async fn select_batch(cx: &mut Cx) -> Result<Option<Vec<MerchantPayoutCreated>>, CallError> {
    cx.begin().await?;
    let batch = cx.config::<crate::SystemConfig>().relay_batch;
    let rows = cx.fetch_all("select", SELECT_UNPUBLISHED, &[Val::I64(batch), Val::Now]).await?;
    cx.idle(rows.is_empty());
    if rows.is_empty() {
        cx.commit().await?;
        return Ok(None);
    }
    cx.crash_point(points::RELAY_AFTER_SELECT);
    rows.iter().map(|r| publication(cx, r)).collect::<Result<Vec<_>, _>>().map(Some)
}

/// Sets `published_at` of outbox row `id` to the logical now (a yield point named `mark`).
pub async fn mark(cx: &mut Cx, id: uuid::Uuid, column: &str) -> Result<(), CallError> {
    let sql = format!("UPDATE outbox_event SET {column} = $2 WHERE id = $1");
    cx.execute("mark", &sql, &[Val::Uuid(id), Val::Now]).await.map(|_| ())
}

#[async_trait(?Send)]
impl Relay for OutboxRelay {
    async fn run_once(&self, cx: &mut Cx) -> Result<(), CallError> {
        let Some(batch) = select_batch(cx).await? else { return Ok(()) };
        for event in &batch {
            cx.send("send", queues::PAYOUTS, event, event.outbox_id).await?;
            cx.crash_point(points::RELAY_AFTER_SEND);
            mark(cx, event.outbox_id, "published_at").await?;
            cx.crash_point(points::RELAY_AFTER_MARK);
        }
        cx.commit().await
    }
}
