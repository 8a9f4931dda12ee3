//! Harmless variants: consumers that differ from the reference and are still correct. The
//! catalogue fails if it catches one (a false alarm), as it fails if it misses a mutant.

use async_trait::async_trait;

use crate::messages::PaymentCaptured;
use crate::points;
use crate::reference::consumer::{handle, CONSUMER};
use crate::reference::{acknowledge, park, DispatchLock};
use crate::system::{CallError, Consumer, Cx, Delivery};
use crashpoint::Val;

/// `inbox-lookup-first`: before its transaction, looks the event up in `processed_message` (a
/// yield point named `lookup`) and acknowledges a duplicate it finds there without opening
/// one; otherwise runs the reference's transaction, whose claim (`INSERT … ON CONFLICT DO
/// NOTHING`) still decides the race between two deliveries that both found nothing. A common
/// optimisation: it saves a transaction per redelivery and changes no outcome.
pub struct InboxLookupFirst;

#[async_trait(?Send)]
impl Consumer for InboxLookupFirst {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let ev: PaymentCaptured = match serde_json::from_str(&d.body) {
            Ok(ev) => ev,
            Err(e) => return park(cx, CONSUMER, &d, &format!("malformed PaymentCaptured: {e}"), None).await,
        };
        cx.crash_point(points::AFTER_RECEIVE);
        let seen = cx
            .fetch_optional(
                "lookup",
                "SELECT 1 FROM processed_message WHERE consumer_name = $1 AND message_id = $2",
                &[Val::Text(CONSUMER.into()), Val::Uuid(ev.event_id)],
            )
            .await?
            .is_some();
        let handled = if seen {
            cx.note(format!("{} found in the inbox: duplicate, no transaction", ev.event_id));
            Ok(())
        } else {
            handle(cx, &ev).await.map(|_| ())
        };
        acknowledge(cx, CONSUMER, &d, &DispatchLock::of(&ev), handled).await
    }
}
