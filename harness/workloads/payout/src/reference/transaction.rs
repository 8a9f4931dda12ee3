//! The payout handler's transaction (the payout article's `CreateMerchantPayoutHandler`) and its steps,
//! shared by the one-message consumer ([`super::consumer`]), the batch consumer
//! ([`super::batch`]) and the mutants that put the steps together differently.

use sqlx::Row;

use crate::messages::PaymentCaptured;
use crate::points;
use crate::system::{CallError, Cx};
use crashpoint::Val;

/// `consumer_name` of the payout consumer (the payout article).
pub const CONSUMER: &str = "create-merchant-payout-v1";

/// Inserts the `MerchantPayoutCreated` outbox row for `payout_id`, caused by `ev`
/// (a yield point named `insert_outbox`), inside the caller's transaction. The row gets its
/// trace label (`ob1`, `ob2`, …) here, in order of creation, and its `next_attempt_at` from
/// the logical clock (the relay compares it with the logical now).
pub async fn insert_outbox(cx: &mut Cx, ev: &PaymentCaptured, payout_id: uuid::Uuid) -> Result<(), CallError> {
    let payload = serde_json::json!({
        "payoutId": payout_id,
        "paymentId": ev.payment_id,
        "merchantId": ev.merchant_id,
        "amount": ev.amount_minor,
        "currency": ev.currency,
    });
    let row = cx
        .fetch_optional(
            "insert_outbox",
            "INSERT INTO outbox_event (id, causation_id, event_type, aggregate_id, payload, next_attempt_at) \
             VALUES (gen_random_uuid(), $1, 'MerchantPayoutCreated', $2, $3, $4) RETURNING id",
            &[Val::Uuid(ev.event_id), Val::Uuid(ev.payment_id), Val::Json(payload), Val::Now],
        )
        .await?;
    if let Some(id) = row.map(|r| r.try_get::<uuid::Uuid, _>(0)).transpose()? {
        cx.label("ob", id);
    }
    Ok(())
}

/// Claims `id` for `consumer` in `processed_message` (`INSERT … ON CONFLICT DO NOTHING
/// RETURNING`, a yield point named `claim`); false when it was already claimed (a duplicate).
pub async fn claim(cx: &mut Cx, consumer: &str, id: uuid::Uuid) -> Result<bool, CallError> {
    let row = cx
        .fetch_optional(
            "claim",
            "INSERT INTO processed_message (consumer_name, message_id, processed_at) \
             VALUES ($1, $2, $3) ON CONFLICT (consumer_name, message_id) DO NOTHING \
             RETURNING message_id",
            &[Val::Text(consumer.into()), Val::Uuid(id), Val::Now],
        )
        .await?;
    Ok(row.is_some())
}

/// Inserts the payout of `ev` (a yield point named `insert_payout`). With `guarded`, `ON
/// CONFLICT (source_payment_id) DO NOTHING` (the payout article); `None` when the payment already had one.
pub async fn insert_payout(cx: &mut Cx, ev: &PaymentCaptured, guarded: bool) -> Result<Option<uuid::Uuid>, CallError> {
    let sql = if guarded {
        "INSERT INTO merchant_payout (id, source_payment_id, merchant_id, amount_minor, currency) \
         VALUES (gen_random_uuid(), $1, $2, $3, $4) \
         ON CONFLICT (source_payment_id) DO NOTHING RETURNING id"
    } else {
        "INSERT INTO merchant_payout (id, source_payment_id, merchant_id, amount_minor, currency) \
         VALUES (gen_random_uuid(), $1, $2, $3, $4) RETURNING id"
    };
    let vals = [
        Val::Uuid(ev.payment_id),
        Val::Uuid(ev.merchant_id),
        Val::I64(ev.amount_minor),
        Val::Text(ev.currency.clone()),
    ];
    let row = cx.fetch_optional("insert_payout", sql, &vals).await?;
    let id = row.map(|r| r.try_get::<uuid::Uuid, _>(0)).transpose()?;
    if let Some(id) = id {
        cx.label("po", id);
    }
    Ok(id)
}

/// Runs the handler's transaction (the payout article's `CreateMerchantPayoutHandler`). `Ok(true)` when
/// the payout was created, `Ok(false)` for a duplicate. The caller rolls back on error.
pub async fn handle(cx: &mut Cx, ev: &PaymentCaptured) -> Result<bool, CallError> {
    handle_with(cx, ev, true).await
}

/// [`handle`], with the payout insert guarded by `ON CONFLICT (source_payment_id)` or not
/// (for schemas without the constraint, where the dedup table is the only protection).
pub async fn handle_with(cx: &mut Cx, ev: &PaymentCaptured, guarded: bool) -> Result<bool, CallError> {
    cx.crash_point(points::AFTER_RECEIVE);
    cx.begin().await?;
    let claimed = claim(cx, CONSUMER, ev.event_id).await?;
    cx.crash_point(points::AFTER_CLAIM);
    if !claimed {
        cx.note(format!("{} already processed: duplicate, no effect", ev.event_id));
        cx.commit().await?;
        return Ok(false);
    }
    let payout = insert_payout(cx, ev, guarded).await?;
    cx.crash_point(points::AFTER_BUSINESS_INSERT);
    let Some(payout_id) = payout else {
        return Err(CallError::Unrecoverable(format!("Payment {} already has a merchant payout", ev.payment_id)));
    };
    insert_outbox(cx, ev, payout_id).await?;
    cx.commit().await?;
    Ok(true)
}
