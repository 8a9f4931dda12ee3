//! Batch consumers that break a rule of DeleteMessageBatch ([`crate::reference::batch`]). Each
//! receives up to 10 messages whatever the scenario's `max_messages`, so that its window is
//! open in every scenario; the reference with `max_messages = 10` is the correct one.

use async_trait::async_trait;

use crate::reference::batch::{handle_batch, BatchAck};
use crate::reference::PayoutConsumer;
use crate::system::{CallError, Consumer, Cx, Delivery};

/// A payout consumer receiving 10 messages at a time and acknowledging them with `BatchAck`.
pub struct BatchConsumer(pub BatchAck);

#[async_trait(?Send)]
impl Consumer for BatchConsumer {
    /// Not called (every receive goes to [`Consumer::on_batch`]); the reference's handling.
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        PayoutConsumer.on_delivery(cx, d).await
    }

    fn max_messages(&self, _cx: &Cx) -> u32 {
        10
    }

    async fn on_batch(&self, cx: &mut Cx, deliveries: Vec<Delivery>) -> Result<(), CallError> {
        handle_batch(cx, deliveries, self.0).await
    }
}
