//! Payout consumers that get at-least-once delivery wrong, each as the seeds describe it.
//! They are built from the reference consumer's steps ([`claim`], [`insert_payout`],
//! [`insert_outbox`], [`acknowledge`]) put together differently.

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use crate::messages::PaymentCaptured;
use crate::points;
use crate::reference::consumer::{claim, insert_outbox, insert_payout, CONSUMER};
use crate::reference::{acknowledge, fail_or_retry, DispatchLock};
use crate::system::{CallError, Consumer, Cx, Delivery};
use crashpoint::Val;

fn parse(d: &Delivery) -> Result<PaymentCaptured, CallError> {
    serde_json::from_str(&d.body).map_err(|e| CallError::Service(format!("malformed PaymentCaptured: {e}")))
}

/// The handling of one event, between the reference's parse and `after_receive` crash point
/// and its acknowledgement ([`acknowledge`]); [`Acked`] makes a [`Consumer`] of it.
#[async_trait(?Send)]
pub trait Body {
    /// Handles `ev`, received as `d`. The caller rolls back on error.
    async fn body(&self, cx: &mut Cx, ev: &PaymentCaptured, d: &Delivery) -> Result<(), CallError>;
}

/// A [`Body`] run as a payout consumer with the reference's acknowledgement.
pub struct Acked<B>(pub B);

#[async_trait(?Send)]
impl<B: Body> Consumer for Acked<B> {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let ev = parse(&d)?;
        cx.crash_point(points::AFTER_RECEIVE);
        let r = self.0.body(cx, &ev, &d).await;
        acknowledge(cx, CONSUMER, &d, &DispatchLock::of(&ev), r).await
    }
}

/// Payout and outbox row inside the caller's transaction, with no dedup of any kind.
async fn pay_in_tx(cx: &mut Cx, ev: &PaymentCaptured) -> Result<(), CallError> {
    let payout = insert_payout(cx, ev, false).await?;
    cx.crash_point(points::AFTER_BUSINESS_INSERT);
    let id = payout.ok_or_else(|| CallError::Service("INSERT returned no row".into()))?;
    insert_outbox(cx, ev, id).await
}

/// [`pay_in_tx`] in a transaction of its own.
async fn pay(cx: &mut Cx, ev: &PaymentCaptured) -> Result<(), CallError> {
    cx.begin().await?;
    pay_in_tx(cx, ev).await?;
    cx.commit().await
}

/// `no-dedup`: no `processed_message` claim, and (with its schema) no unique constraint on the
/// payout. Every redelivery pays again.
pub struct NoDedup;

#[async_trait(?Send)]
impl Body for NoDedup {
    async fn body(&self, cx: &mut Cx, ev: &PaymentCaptured, _: &Delivery) -> Result<(), CallError> {
        pay(cx, ev).await
    }
}

/// `check-then-insert`: `SELECT EXISTS` on the payout, then `INSERT`, with no claim and no
/// unique constraint (the payout article: "both pods can observe 'not found' before either inserts").
/// A payment found paid is parked as the reference does, so the race is its only defect.
pub struct CheckThenInsert;

#[async_trait(?Send)]
impl Body for CheckThenInsert {
    async fn body(&self, cx: &mut Cx, ev: &PaymentCaptured, _: &Delivery) -> Result<(), CallError> {
        cx.begin().await?;
        let row = cx
            .fetch_optional(
                "check",
                "SELECT EXISTS (SELECT 1 FROM merchant_payout WHERE source_payment_id = $1)",
                &[Val::Uuid(ev.payment_id)],
            )
            .await?;
        if row.map(|r| r.try_get::<bool, _>(0)).transpose()?.unwrap_or(false) {
            return Err(CallError::Unrecoverable(format!("Payment {} already has a merchant payout", ev.payment_id)));
        }
        pay_in_tx(cx, ev).await?;
        cx.commit().await
    }
}

/// `redis-only-dedup`: `SET processed.<event_id> NX` with a TTL is the only record of
/// "processed" (the payout article, "What I got wrong"). When the key expires or Redis restarts, a
/// redelivery pays again.
pub struct RedisOnlyDedup;

#[async_trait(?Send)]
impl Consumer for RedisOnlyDedup {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let ev = parse(&d)?;
        cx.crash_point(points::AFTER_RECEIVE);
        let ttl_ms = cx.config::<crate::SystemConfig>().lock_ttl_s * 1000;
        if cx.lock("mark_processed", &format!("processed.{}", ev.event_id), ttl_ms).await?.is_none() {
            cx.note(format!("{} marked processed in Redis: skipped", ev.event_id));
            return acknowledge(cx, CONSUMER, &d, &DispatchLock::of(&ev), Ok(())).await;
        }
        cx.crash_point(points::AFTER_CLAIM);
        let r = pay(cx, &ev).await;
        acknowledge(cx, CONSUMER, &d, &DispatchLock::of(&ev), r).await
    }
}

/// `dedup-separate-tx`: the claim commits in its own transaction before the business effect.
/// A crash in between makes every retry skip the event: silent loss (the payout article).
pub struct DedupSeparateTx;

#[async_trait(?Send)]
impl Body for DedupSeparateTx {
    async fn body(&self, cx: &mut Cx, ev: &PaymentCaptured, _: &Delivery) -> Result<(), CallError> {
        cx.begin().await?;
        let claimed = claim(cx, CONSUMER, ev.event_id).await?;
        cx.commit().await?;
        cx.crash_point(points::AFTER_CLAIM);
        if !claimed {
            cx.note(format!("{} already claimed: skipped", ev.event_id));
            return Ok(());
        }
        pay(cx, ev).await
    }
}

/// `outbox-in-second-tx`: the claim and the payout commit together, then the outbox row
/// commits in a transaction of its own. A crash between the two commits (a window between two
/// calls, `commit` and `begin`, where the code marks no crash point) loses the
/// `MerchantPayoutCreated` event for good: every retry finds the claim and skips the event.
pub struct OutboxInSecondTx;

#[async_trait(?Send)]
impl Body for OutboxInSecondTx {
    async fn body(&self, cx: &mut Cx, ev: &PaymentCaptured, _: &Delivery) -> Result<(), CallError> {
        cx.begin().await?;
        if !claim(cx, CONSUMER, ev.event_id).await? {
            cx.note(format!("{} already processed: duplicate, no effect", ev.event_id));
            return cx.commit().await;
        }
        cx.crash_point(points::AFTER_CLAIM);
        let payout = insert_payout(cx, ev, true).await?;
        cx.crash_point(points::AFTER_BUSINESS_INSERT);
        let id = payout.ok_or_else(|| {
            CallError::Unrecoverable(format!("Payment {} already has a merchant payout", ev.payment_id))
        })?;
        cx.commit().await?;
        cx.begin().await?;
        insert_outbox(cx, ev, id).await?;
        cx.commit().await
    }
}

/// `key-per-attempt`: a fresh id per attempt serves as the message identity, for the claim and
/// the outbox causation (the payout article: "Generating it inside the handler defeats the entire
/// design"). The id is derived from the worker and the receive count, so traces stay
/// deterministic; it is still new on every attempt.
pub struct KeyPerAttempt;

#[async_trait(?Send)]
impl Consumer for KeyPerAttempt {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let mut ev = parse(&d)?;
        let lock = DispatchLock::of(&ev);
        let attempt = format!("{}/{}/{}", cx.name(), d.msg, d.receive_count);
        ev.event_id = Uuid::new_v5(&ev.event_id, attempt.as_bytes());
        cx.crash_point(points::AFTER_RECEIVE);
        let r = async {
            cx.begin().await?;
            claim(cx, CONSUMER, ev.event_id).await?;
            cx.crash_point(points::AFTER_CLAIM);
            let payout = insert_payout(cx, &ev, true).await?;
            cx.crash_point(points::AFTER_BUSINESS_INSERT);
            let id = payout.ok_or_else(|| {
                CallError::Unrecoverable(format!("Payment {} already has a merchant payout", ev.payment_id))
            })?;
            insert_outbox(cx, &ev, id).await?;
            cx.commit().await
        }
        .await;
        acknowledge(cx, CONSUMER, &d, &lock, r).await
    }
}

/// `ack-before-commit`: DeleteMessage before COMMIT. A crash in between rolls the transaction
/// back after the message is gone: the event is lost (the payout article: "If the message is deleted
/// first, a crash can lose the business operation completely").
pub struct AckBeforeCommit;

#[async_trait(?Send)]
impl Consumer for AckBeforeCommit {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let ev = parse(&d)?;
        let lock = DispatchLock::of(&ev);
        cx.crash_point(points::AFTER_RECEIVE);
        let r = async {
            cx.begin().await?;
            let claimed = claim(cx, CONSUMER, ev.event_id).await?;
            cx.crash_point(points::AFTER_CLAIM);
            if claimed {
                let payout = insert_payout(cx, &ev, true).await?;
                cx.crash_point(points::AFTER_BUSINESS_INSERT);
                let id = payout.ok_or_else(|| {
                    CallError::Unrecoverable(format!("Payment {} already has a merchant payout", ev.payment_id))
                })?;
                insert_outbox(cx, &ev, id).await?;
            }
            cx.delete(&d).await?;
            cx.crash_point(points::AFTER_DELETE);
            cx.commit().await?;
            lock.release(cx).await
        }
        .await;
        match r {
            Ok(()) => Ok(()),
            Err(e) => {
                cx.rollback().await?;
                fail_or_retry(cx, CONSUMER, &d, &e, Some(&lock)).await
            }
        }
    }
}

/// `skip-without-delete`: a detected duplicate returns without deleting the message, which
/// comes back at every visibility expiry (caught by the liveness invariant).
pub struct SkipWithoutDelete;

#[async_trait(?Send)]
impl Consumer for SkipWithoutDelete {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let ev = parse(&d)?;
        let lock = DispatchLock::of(&ev);
        cx.crash_point(points::AFTER_RECEIVE);
        let r = async {
            cx.begin().await?;
            let claimed = claim(cx, CONSUMER, ev.event_id).await?;
            cx.crash_point(points::AFTER_CLAIM);
            if !claimed {
                cx.commit().await?;
                return Ok(false);
            }
            let id = insert_payout(cx, &ev, true).await?.ok_or_else(|| {
                CallError::Unrecoverable(format!("Payment {} already has a merchant payout", ev.payment_id))
            })?;
            cx.crash_point(points::AFTER_BUSINESS_INSERT);
            insert_outbox(cx, &ev, id).await?;
            cx.commit().await?;
            Ok(true)
        }
        .await;
        match r {
            Ok(false) => {
                cx.note(format!("{} is a duplicate: returned without deleting {}", ev.event_id, d.msg));
                Ok(())
            }
            Ok(true) => acknowledge(cx, CONSUMER, &d, &lock, Ok(())).await,
            Err(e) => acknowledge(cx, CONSUMER, &d, &lock, Err(e)).await,
        }
    }
}

/// `lock-released-on-failure` (paired with no-dedup): when the handler throws, the dispatch
/// lock is released before the retry, so a fresh dispatch with the same key runs beside it.
pub struct LockReleasedOnFailure;

#[async_trait(?Send)]
impl Consumer for LockReleasedOnFailure {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let ev = parse(&d)?;
        let lock = DispatchLock::of(&ev);
        cx.crash_point(points::AFTER_RECEIVE);
        let r = pay(cx, &ev).await;
        if r.is_err() {
            cx.rollback().await?;
            lock.release(cx).await?;
        }
        acknowledge(cx, CONSUMER, &d, &lock, r).await
    }
}

/// `park-failure-acked`: writing to the failure transport fails, and the message is deleted
/// anyway: an event that had to be parked is lost.
pub struct ParkFailureAcked;

#[async_trait(?Send)]
impl Consumer for ParkFailureAcked {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let ev = parse(&d)?;
        let lock = DispatchLock::of(&ev);
        let r = crate::reference::consumer::handle(cx, &ev).await.map(|_| ());
        let must_park = match &r {
            Err(CallError::Unrecoverable(_)) => true,
            Err(_) => d.receive_count > cx.config::<crate::SystemConfig>().max_retries,
            Ok(()) => false,
        };
        if !must_park {
            return acknowledge(cx, CONSUMER, &d, &lock, r).await;
        }
        let reason = r.err().map(|e| e.to_string()).unwrap_or_default();
        cx.rollback().await?;
        let parked = cx
            .execute(
                "park",
                "INSERT INTO failed_messages (consumer_name, message_id, reason) VALUES ($1, $2, $3)",
                &[Val::Text(CONSUMER.into()), Val::Uuid(ev.event_id), Val::Text(reason)],
            )
            .await;
        if let Err(pe) = parked {
            cx.note(format!("parking {} failed ({pe}); deleting it anyway", d.msg));
        }
        cx.delete(&d).await
    }
}

/// `balance-increment`: `available = available + amount` on the merchant balance with no dedup
/// record (the counter article's counter shape). The payout insert is still guarded, but the increment is
/// not: a redelivery credits twice.
pub struct BalanceIncrement;

#[async_trait(?Send)]
impl Body for BalanceIncrement {
    async fn body(&self, cx: &mut Cx, ev: &PaymentCaptured, _: &Delivery) -> Result<(), CallError> {
        cx.begin().await?;
        let payout = insert_payout(cx, ev, true).await?;
        cx.crash_point(points::AFTER_BUSINESS_INSERT);
        cx.execute(
            "credit",
            "INSERT INTO merchant_balance (merchant_id, available_minor) VALUES ($1, $2) \
             ON CONFLICT (merchant_id) DO UPDATE SET available_minor = merchant_balance.available_minor + EXCLUDED.available_minor",
            &[Val::Uuid(ev.merchant_id), Val::I64(ev.amount_minor)],
        )
        .await?;
        if let Some(id) = payout {
            insert_outbox(cx, ev, id).await?;
        }
        cx.commit().await
    }
}

/// The reference consumer for a schema without the payout's unique constraint: the dedup
/// table is the only protection (the payout article: "A generic deduplication table becomes useful when
/// the business table has no natural unique key"). Correct on its own; `short-retention`
/// pairs it with a retention window shorter than redelivery.
pub struct DedupTableOnly;

#[async_trait(?Send)]
impl Body for DedupTableOnly {
    async fn body(&self, cx: &mut Cx, ev: &PaymentCaptured, _: &Delivery) -> Result<(), CallError> {
        crate::reference::consumer::handle_with(cx, ev, false).await.map(|_| ())
    }
}

/// `lock-without-token`: the reference consumer, releasing the dispatch lock with a plain `DEL`
/// instead of a compare-and-delete of the token its message carries (what the reference did
/// before the lock held its holder's token, and a lock stored as a constant allows no better). When the lock expired
/// while the message was being handled and a later dispatch took it, this consumer deletes
/// the later dispatch's lock, and a third dispatch is no longer suppressed.
pub struct LockWithoutToken;

#[async_trait(?Send)]
impl Consumer for LockWithoutToken {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let ev = parse(&d)?;
        let lock = DispatchLock { token: None, ..DispatchLock::of(&ev) };
        let r = crate::reference::consumer::handle(cx, &ev).await.map(|_| ());
        acknowledge(cx, CONSUMER, &d, &lock, r).await
    }
}
