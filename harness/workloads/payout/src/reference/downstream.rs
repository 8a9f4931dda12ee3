use async_trait::async_trait;

use super::fail_or_retry;
use crate::messages::MerchantPayoutCreated;
use crate::system::{CallError, Cx, Delivery, Downstream};
use crashpoint::Val;

/// The downstream consumer of `MerchantPayoutCreated`: its own `processed_message` claim under
/// its own `consumer_name`, then one settlement entry, in one transaction; then delete.
/// Duplicate publications are harmless (the payout article, "At-least-once publishing is the honest
/// choice").
pub struct SettlementProjection;

/// `consumer_name` of the downstream consumer.
pub const DOWNSTREAM: &str = "settlement-projection-v1";

#[async_trait(?Send)]
impl Downstream for SettlementProjection {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let ev: MerchantPayoutCreated = match serde_json::from_str(&d.body) {
            Ok(ev) => ev,
            Err(e) => {
                let err = CallError::Unrecoverable(format!("malformed MerchantPayoutCreated: {e}"));
                return fail_or_retry(cx, DOWNSTREAM, &d, &err, None).await;
            }
        };
        let r = apply(cx, &ev).await;
        match r {
            Ok(()) => cx.delete(&d).await,
            Err(e) => {
                cx.rollback().await?;
                fail_or_retry(cx, DOWNSTREAM, &d, &e, None).await
            }
        }
    }
}

async fn apply(cx: &mut Cx, ev: &MerchantPayoutCreated) -> Result<(), CallError> {
    cx.begin().await?;
    let claimed = super::consumer::claim(cx, DOWNSTREAM, ev.outbox_id).await?;
    if !claimed {
        cx.note(format!("publication {} already applied: duplicate, no effect", ev.outbox_id));
        return cx.commit().await;
    }
    apply_settlement(cx, ev).await?;
    cx.commit().await
}

/// Inserts the settlement entry of `ev` (a yield point named `apply`), without any dedup.
pub async fn apply_settlement(cx: &mut Cx, ev: &MerchantPayoutCreated) -> Result<(), CallError> {
    cx.execute(
        "apply",
        "INSERT INTO settlement_entry (outbox_id, payout_id, payment_id, amount_minor) \
         VALUES ($1, $2, $3, $4)",
        &[Val::Uuid(ev.outbox_id), Val::Uuid(ev.payout_id), Val::Uuid(ev.payment_id), Val::I64(ev.amount_minor)],
    )
    .await
    .map(|_| ())
}
