use async_trait::async_trait;
use sqlx::Row;

use crate::sim::cx::Val;
use crate::sim::points::CrashPoint;
use crate::sut::messages::PaymentCaptured;
use crate::sut::reference::{acknowledge, consumer::{insert_outbox, CONSUMER}, lock_key};
use crate::sut::{CallError, Consumer, Cx, Delivery};

/// `no-dedup`: inserts the payout and the outbox row with no `processed_message` claim, and
/// runs against a schema without `UNIQUE (source_payment_id)`. Every redelivery pays again.
pub struct NoDedupConsumer;

#[async_trait(?Send)]
impl Consumer for NoDedupConsumer {
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
