use async_trait::async_trait;

use super::{acknowledge, park, DispatchLock};
use crate::messages::PaymentCaptured;
use crate::system::{CallError, Consumer, Cx, Delivery};

/// the payout article's `CreateMerchantPayoutHandler` inside a Messenger SQS worker.
///
/// One transaction: claim `processed_message` (a duplicate commits and is deleted), insert the
/// payout `ON CONFLICT (source_payment_id) DO NOTHING RETURNING id` (no row: unrecoverable,
/// parked), insert the outbox row, commit. Then release the dispatch lock and delete.
pub struct PayoutConsumer;

pub use super::transaction::{claim, handle, handle_with, insert_outbox, insert_payout, CONSUMER};

#[async_trait(?Send)]
impl Consumer for PayoutConsumer {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let ev: PaymentCaptured = match serde_json::from_str(&d.body) {
            Ok(ev) => ev,
            Err(e) => return park(cx, CONSUMER, &d, &format!("malformed PaymentCaptured: {e}"), None).await,
        };
        let handled = handle(cx, &ev).await.map(|_| ());
        acknowledge(cx, CONSUMER, &d, &DispatchLock::of(&ev), handled).await
    }

    /// `max_messages` of the scenario's `[config]` (default 1).
    fn max_messages(&self, cx: &Cx) -> u32 {
        cx.config::<crate::SystemConfig>().max_messages
    }

    async fn on_batch(&self, cx: &mut Cx, deliveries: Vec<Delivery>) -> Result<(), CallError> {
        super::batch::handle_batch(cx, deliveries, super::batch::REFERENCE).await
    }
}
