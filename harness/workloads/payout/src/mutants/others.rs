//! Relays, downstream consumers and retention jobs that get at-least-once delivery wrong.

use std::cell::RefCell;
use std::collections::BTreeSet;

use async_trait::async_trait;

use crate::messages::MerchantPayoutCreated;
use crate::points;
use crate::queues;
use crate::reference::downstream::{apply_settlement, DOWNSTREAM};
use crate::reference::fail_or_retry;
use crate::reference::relay::{mark, publication, select_batch};
use crate::system::{CallError, Cx, Delivery, Downstream, Relay, Retention};
use crashpoint::Val;

/// `relay-mark-before-send`: commits `published_at`, then sends. A crash in between loses
/// the publication (the payout article: "Marking the row first creates the opposite failure").
pub struct MarkBeforeSend;

#[async_trait(?Send)]
impl Relay for MarkBeforeSend {
    async fn run_once(&self, cx: &mut Cx) -> Result<(), CallError> {
        let Some(batch) = select_batch(cx).await? else { return Ok(()) };
        for ev in &batch {
            mark(cx, ev.outbox_id, "published_at").await?;
        }
        cx.commit().await?;
        cx.crash_point(points::RELAY_AFTER_MARK);
        for ev in &batch {
            cx.send("send", queues::PAYOUTS, ev, ev.outbox_id).await?;
            cx.crash_point(points::RELAY_AFTER_SEND);
        }
        Ok(())
    }
}

/// `relay-mark-fails-after-send`: the first mark of each row (per relay process) errors after
/// a successful send, and the transaction rolls back, so the row is published again. Harmless
/// with the reference downstream; paired with `naive-downstream` it applies twice.
#[derive(Default)]
pub struct MarkFailsAfterSend {
    failed_once: RefCell<BTreeSet<uuid::Uuid>>,
}

#[async_trait(?Send)]
impl Relay for MarkFailsAfterSend {
    async fn run_once(&self, cx: &mut Cx) -> Result<(), CallError> {
        let Some(batch) = select_batch(cx).await? else { return Ok(()) };
        for ev in &batch {
            cx.send("send", queues::PAYOUTS, ev, ev.outbox_id).await?;
            cx.crash_point(points::RELAY_AFTER_SEND);
            let first = self.failed_once.borrow_mut().insert(ev.outbox_id);
            mark(cx, ev.outbox_id, if first { "published_at_typo" } else { "published_at" }).await?;
            cx.crash_point(points::RELAY_AFTER_MARK);
        }
        cx.commit().await
    }
}

/// `relay-watermark`: a relay that remembers how far it got instead of asking for every
/// unpublished row. It selects rows created after its watermark (`created_at >
/// relay_watermark.last_created_at`) and moves the watermark with each row it marks. A row's
/// `created_at` is its transaction's start (`DEFAULT now()`), so a transaction that began
/// earlier and commits after the relay has passed a newer row inserts below the watermark, and
/// its row is never published (the payout article: "the relay selects unpublished rows").
/// `created_at` is PostgreSQL's wall-clock `now()`, yet the order of two rows' values is
/// deterministic: the scheduler runs one BEGIN at a time, in schedule order.
pub struct WatermarkRelay;

/// The watermark relay's table, added to the reference schema.
pub const WATERMARK_SQL: &str =
    "\nCREATE TABLE relay_watermark (\n    relay TEXT PRIMARY KEY,\n    last_created_at TIMESTAMPTZ NOT NULL\n);\n";

/// Unpublished rows above the watermark, oldest first; the same columns as the reference's.
const SELECT_ABOVE_WATERMARK: &str = "SELECT id, aggregate_id, payload FROM outbox_event \
     WHERE published_at IS NULL AND next_attempt_at <= $2 \
       AND created_at > COALESCE((SELECT last_created_at FROM relay_watermark WHERE relay = 'outbox'), '-infinity') \
     ORDER BY created_at, id FOR UPDATE SKIP LOCKED LIMIT $1";

/// Marks the row published and moves the watermark up to its `created_at`, in one statement.
const MARK_AND_ADVANCE: &str = "WITH marked AS (UPDATE outbox_event SET published_at = $2 WHERE id = $1 RETURNING created_at) \
     INSERT INTO relay_watermark (relay, last_created_at) SELECT 'outbox', created_at FROM marked \
     ON CONFLICT (relay) DO UPDATE SET last_created_at = GREATEST(relay_watermark.last_created_at, EXCLUDED.last_created_at)";

#[async_trait(?Send)]
impl Relay for WatermarkRelay {
    async fn run_once(&self, cx: &mut Cx) -> Result<(), CallError> {
        cx.begin().await?;
        let batch = cx.config::<crate::SystemConfig>().relay_batch;
        let rows = cx.fetch_all("select", SELECT_ABOVE_WATERMARK, &[Val::I64(batch), Val::Now]).await?;
        cx.idle(rows.is_empty());
        if rows.is_empty() {
            return cx.commit().await;
        }
        cx.crash_point(points::RELAY_AFTER_SELECT);
        let batch = rows.iter().map(|r| publication(cx, r)).collect::<Result<Vec<_>, _>>()?;
        for ev in &batch {
            cx.send("send", queues::PAYOUTS, ev, ev.outbox_id).await?;
            cx.crash_point(points::RELAY_AFTER_SEND);
            cx.execute("mark", MARK_AND_ADVANCE, &[Val::Uuid(ev.outbox_id), Val::Now]).await?;
            cx.crash_point(points::RELAY_AFTER_MARK);
        }
        cx.commit().await
    }
}

/// `naive-downstream`: applies every `MerchantPayoutCreated` it receives, with no dedup, so a
/// duplicate publication is applied twice.
pub struct NaiveDownstream;

#[async_trait(?Send)]
impl Downstream for NaiveDownstream {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let ev: MerchantPayoutCreated =
            serde_json::from_str(&d.body).map_err(|e| CallError::Service(format!("malformed body: {e}")))?;
        let r = async {
            cx.begin().await?;
            apply_settlement(cx, &ev).await?;
            cx.commit().await
        }
        .await;
        match r {
            Ok(()) => cx.delete(&d).await,
            Err(e) => {
                cx.rollback().await?;
                fail_or_retry(cx, DOWNSTREAM, &d, &e, None).await
            }
        }
    }
}

/// `short-retention`: purges dedup rows older than 1 s, far sooner than a redelivery or a
/// replay can arrive; with no unique constraint on the payout, the late copy pays again.
pub struct ShortRetention;

#[async_trait(?Send)]
impl Retention for ShortRetention {
    async fn run_once(&self, cx: &mut Cx) -> Result<(), CallError> {
        let n =
            cx.execute("purge", "DELETE FROM processed_message WHERE processed_at < $1", &[Val::NowMinusS(1)]).await?;
        cx.note(format!("retention purged {n} dedup rows older than 1s"));
        Ok(())
    }
}
