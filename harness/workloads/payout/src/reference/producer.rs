use async_trait::async_trait;

use super::lock_key;
use crate::messages::PaymentCaptured;
use crate::points;
use crate::queues;
use crate::system::{CallError, Cx, Producer};

/// Dispatch with a DeduplicateStamp: `SET payment-captured.<event_id> <token> NX PX ttl`, then
/// SendMessage of the event with the lock's token, for its consumer's release. A held lock
/// suppresses the dispatch (the payout article, "Redis locks reduce overlap, not duplicates").
pub struct DedupProducer;

#[async_trait(?Send)]
impl Producer for DedupProducer {
    async fn dispatch(&self, cx: &mut Cx, event: &PaymentCaptured) -> Result<(), CallError> {
        let key = lock_key(&event.event_id);
        let ttl_ms = cx.config::<crate::SystemConfig>().lock_ttl_s * 1000;
        let Some(token) = cx.lock("lock", &key, ttl_ms).await? else {
            cx.note(format!("dispatch of {} suppressed: lock {key} is held", event.event_id));
            return Ok(());
        };
        cx.crash_point(points::AFTER_LOCK);
        let stamped = PaymentCaptured { lock_token: Some(token), ..event.clone() };
        cx.send("send", queues::PAYMENTS, &stamped, event.event_id).await?;
        cx.crash_point(points::AFTER_SEND);
        Ok(())
    }
}
