//! The payout system's crash points: the semantic moments between two service calls where a
//! crash or an injected failure can happen (the payout article's failure windows).

use crashpoint::CrashPoint;

/// Producer: the Redis DeduplicateStamp lock was taken; nothing was sent.
pub const AFTER_LOCK: CrashPoint = "after_lock";
/// Producer: SendMessage returned.
pub const AFTER_SEND: CrashPoint = "after_send";
/// Consumer: a message was received, nothing else happened yet.
pub const AFTER_RECEIVE: CrashPoint = "after_receive";
/// Consumer: the `processed_message` claim returned.
pub const AFTER_CLAIM: CrashPoint = "after_claim";
/// Consumer: the business insert (`merchant_payout`) returned.
pub const AFTER_BUSINESS_INSERT: CrashPoint = "after_business_insert";
/// Consumer: the transaction committed; DeleteMessage has not been called (the payout article's opening
/// scenario).
pub const AFTER_COMMIT: CrashPoint = "after_commit";
/// Consumer: DeleteMessage returned.
pub const AFTER_DELETE: CrashPoint = "after_delete";
/// Relay: unpublished outbox rows were selected `FOR UPDATE SKIP LOCKED`.
pub const RELAY_AFTER_SELECT: CrashPoint = "relay_after_select";
/// Relay: SendMessage returned; `published_at` is not yet set.
pub const RELAY_AFTER_SEND: CrashPoint = "relay_after_send";
/// Relay: `published_at` was set; the transaction has not committed.
pub const RELAY_AFTER_MARK: CrashPoint = "relay_after_mark";

/// The producer's points, in pipeline order.
pub const PRODUCER: &[CrashPoint] = &[AFTER_LOCK, AFTER_SEND];
/// The consumer's points, in pipeline order.
pub const CONSUMER: &[CrashPoint] = &[AFTER_RECEIVE, AFTER_CLAIM, AFTER_BUSINESS_INSERT, AFTER_COMMIT, AFTER_DELETE];
/// The relay's points, in pipeline order.
pub const RELAY: &[CrashPoint] = &[RELAY_AFTER_SELECT, RELAY_AFTER_SEND, RELAY_AFTER_MARK];
