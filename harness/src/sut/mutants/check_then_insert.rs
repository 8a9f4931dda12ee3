use async_trait::async_trait;
use sqlx::Row;

use crate::sim::cx::Val;
use crate::sim::points::CrashPoint;
use crate::sut::messages::PaymentCaptured;
use crate::sut::reference::{acknowledge, consumer::{insert_outbox, CONSUMER}, lock_key};
use crate::sut::{CallError, Consumer, Cx, Delivery};

/// `check-then-insert`: `SELECT EXISTS` on the payout, then `INSERT` when it found none, with
/// no dedup claim and no unique constraint (seed 000: "Do not replace this with a check
/// followed by an insert"). The race shows only when two consumers interleave between the two
/// statements.
pub struct CheckThenInsertConsumer;

#[async_trait(?Send)]
impl Consumer for CheckThenInsertConsumer {
    fn name(&self) -> &'static str {
        CONSUMER
    }

    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let ev: PaymentCaptured =
            serde_json::from_str(&d.body).map_err(|e| CallError::Service(format!("malformed body: {e}")))?;
        let key = lock_key(&ev.event_id);
        cx.crash_point(CrashPoint::AfterReceive);
        let r = async {
            cx.begin().await?;
            let exists: bool = cx
                .fetch_optional(
                    "check",
                    "SELECT EXISTS (SELECT 1 FROM merchant_payout WHERE source_payment_id = $1)",
                    &[Val::Uuid(ev.payment_id)],
                )
                .await?
                .map(|r| r.try_get(0))
                .transpose()?
                .unwrap_or(false);
            if exists {
                cx.note(format!("payment {} already has a payout: skipped", ev.payment_id));
                return cx.commit().await;
            }
            let row = cx
                .fetch_optional(
                    "insert_payout",
                    "INSERT INTO merchant_payout (id, source_payment_id, merchant_id, amount_minor, currency) \
                     VALUES (gen_random_uuid(), $1, $2, $3, $4) RETURNING id",
                    &[Val::Uuid(ev.payment_id), Val::Uuid(ev.merchant_id), Val::I64(ev.amount_minor), Val::Text(ev.currency.clone())],
                )
                .await?
                .ok_or_else(|| CallError::Service("INSERT returned no row".into()))?;
            cx.crash_point(CrashPoint::AfterBusinessInsert);
            insert_outbox(cx, &ev, row.try_get(0)?).await?;
            cx.commit().await
        }
        .await;
        acknowledge(cx, CONSUMER, &d, &key, r).await
    }
}
