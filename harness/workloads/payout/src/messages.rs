//! The messages of the reference system (the payout article).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// `PaymentCaptured`, published by the producer to the payments queue.
///
/// `event_id` is the stable identity of the logical event: it stays the same across producer
/// retries, relay republication and SQS redelivery (the payout article, "Start with a stable message
/// identity").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentCaptured {
    /// The idempotency key of the event.
    pub event_id: Uuid,
    /// The payment; one payout per payment.
    pub payment_id: Uuid,
    /// The merchant paid out.
    pub merchant_id: Uuid,
    /// Amount in minor units (cents), > 0.
    pub amount_minor: i64,
    /// ISO 4217 code, 3 letters.
    pub currency: String,
    /// The token of the dispatch lock the producer took for this message (the payout article's
    /// DeduplicateStamp carries the lock's key; Symfony's lock Key carries this token), so that
    /// the consumer releases only that lock; absent when the producer sent none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_token: Option<String>,
}

/// `MerchantPayoutCreated`, written to the outbox by the consumer and published by the relay.
/// Its message identity is the outbox row id (`outbox_id`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MerchantPayoutCreated {
    /// The outbox row id: the stable identity of this publication.
    pub outbox_id: Uuid,
    /// The payout created.
    pub payout_id: Uuid,
    /// The payment paid out.
    pub payment_id: Uuid,
    /// The merchant.
    pub merchant_id: Uuid,
    /// Amount in minor units.
    pub amount_minor: i64,
    /// ISO 4217 code.
    pub currency: String,
}
