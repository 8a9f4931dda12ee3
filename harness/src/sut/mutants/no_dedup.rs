use async_trait::async_trait;
use sqlx::Row;

use crate::sim::cx::Val;
use crate::sim::points::CrashPoint;
use crate::sut::messages::PaymentCaptured;
use crate::sut::reference::{consumer::CONSUMER, fail_or_retry, lock_key};
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
            let payout_id: uuid::Uuid = row.try_get(0)?;
            let payload = serde_json::json!({"payoutId": payout_id, "paymentId": ev.payment_id,
                "merchantId": ev.merchant_id, "amount": ev.amount_minor, "currency": ev.currency});
            cx.execute(
                "insert_outbox",
                "INSERT INTO outbox_event (id, causation_id, event_type, aggregate_id, payload) \
                 VALUES (gen_random_uuid(), $1, 'MerchantPayoutCreated', $2, $3)",
                &[Val::Uuid(ev.event_id), Val::Uuid(ev.payment_id), Val::Json(payload)],
            )
            .await?;
            cx.commit().await
        }
        .await;
        match r {
            Ok(()) => {
                cx.crash_point(CrashPoint::AfterCommit);
                cx.unlock("unlock", &key).await?;
                cx.delete(&d).await?;
                cx.crash_point(CrashPoint::AfterDelete);
                Ok(())
            }
            Err(e) => {
                cx.rollback().await?;
                fail_or_retry(cx, CONSUMER, &d, &e, Some(&key)).await
            }
        }
    }
}
