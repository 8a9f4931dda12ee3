//! Messenger's failure handling: retry with backoff through redelivery, or park the message
//! in the failure transport when the error is unrecoverable or retries are exhausted.

use super::DispatchLock;
use crate::points;
use crate::system::{CallError, Cx, Delivery};
use crashpoint::Val;

/// After a failed attempt (the transaction already rolled back): parks the message when the
/// error is [`CallError::Unrecoverable`] or when `receive_count > max_retries`, else makes it
/// visible again later. Attempts are counted by SQS `ApproximateReceiveCount`, so redeliveries
/// after crashes count too (Messenger counts its own retries instead);
/// the delay is `retry_delay_s * 2^(attempt-1)` logical seconds (the lock is kept for
/// the retries, as Symfony's failure listener does). `lock` is released when parking.
pub async fn fail_or_retry(
    cx: &mut Cx,
    consumer: &str,
    d: &Delivery,
    error: &CallError,
    lock: Option<&DispatchLock>,
) -> Result<(), CallError> {
    let attempt = d.receive_count.max(1);
    let max = cx.config::<crate::SystemConfig>().max_retries;
    if matches!(error, CallError::Unrecoverable(_)) || attempt > max {
        let reason = match error {
            CallError::Unrecoverable(r) => r.clone(),
            e => format!("retries exhausted after {attempt} attempts: {e}"),
        };
        return park(cx, consumer, d, &reason, lock).await;
    }
    let delay = cx.config::<crate::SystemConfig>().retry_delay_s << (attempt - 1).min(16);
    cx.note(format!("attempt {attempt} failed ({error}); retry {attempt}/{max} in {delay}s"));
    cx.change_visibility("retry", d, delay).await
}

/// Writes the message to the failure transport (`failed_message`) with its reason, releases
/// `lock`, then deletes the message from the queue.
pub async fn park(
    cx: &mut Cx,
    consumer: &str,
    d: &Delivery,
    reason: &str,
    lock: Option<&DispatchLock>,
) -> Result<(), CallError> {
    let body: serde_json::Value = serde_json::from_str(&d.body).unwrap_or(serde_json::Value::String(d.body.clone()));
    let id = body
        .get("event_id")
        .or_else(|| body.get("outbox_id"))
        .and_then(|v| v.as_str())
        .and_then(|s| s.parse::<uuid::Uuid>().ok())
        .unwrap_or_default();
    cx.execute(
        "park",
        "INSERT INTO failed_message (consumer_name, message_id, body, reason, failed_at) \
         VALUES ($1, $2, $3, $4, $5)",
        &[Val::Text(consumer.into()), Val::Uuid(id), Val::Json(body), Val::Text(reason.into()), Val::Now],
    )
    .await?;
    cx.note(format!("{} parked in the failure transport: {reason}", d.msg));
    if let Some(lock) = lock {
        lock.release(cx).await?;
    }
    cx.delete(d).await
}

/// Messenger's acknowledgement after the handler: on success release the dispatch lock and
/// delete the message (crash points `after_commit` before, `after_delete` after); on error
/// roll back, then retry or park ([`fail_or_retry`]).
pub async fn acknowledge(
    cx: &mut Cx,
    consumer: &str,
    d: &Delivery,
    lock: &DispatchLock,
    handled: Result<(), CallError>,
) -> Result<(), CallError> {
    match handled {
        Ok(()) => {
            cx.crash_point(points::AFTER_COMMIT);
            lock.release(cx).await?;
            cx.delete(d).await?;
            cx.crash_point(points::AFTER_DELETE);
            Ok(())
        }
        Err(e) => {
            cx.rollback().await?;
            fail_or_retry(cx, consumer, d, &e, Some(lock)).await
        }
    }
}
