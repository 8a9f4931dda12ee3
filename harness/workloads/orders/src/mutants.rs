//! The catalogue: each mutant gets one of the orders article's rules wrong. The three that mint a new
//! key for an attempt also treat the attempt as new, so they do not look the operation up
//! before retrying (a handler that kept the operation's identity would have).

use crate::handlers::{ClaimRule, ConsumerRule, Flaws, KeyRule, OnUnknown};

const R: Flaws = Flaws::REFERENCE;

/// (name, what it gets wrong, its rules).
pub const CATALOGUE: &[(&str, &str, Flaws)] = &[
    ("key-per-attempt", "a new idempotency key on each attempt: a retry after the provider applied charges again", Flaws { key: KeyRule::PerAttempt, look_before_retry: false, ..R }),
    (
        "key-hashes-request",
        "the idempotency key hashed from the whole request, which carries the attempt number",
        Flaws { key: KeyRule::RequestHash, look_before_retry: false, ..R },
    ),
    (
        "timeout-is-failure",
        "a timeout or a 5xx taken as a failure: the operation is failed and a new one created and charged again",
        Flaws { on_unknown: OnUnknown::NewOperation, ..R },
    ),
    (
        "in-progress-forever",
        "an in-progress record written before the call that never expires: a crash or a timeout leaves the operation stuck",
        Flaws { claim: ClaimRule::InProgressForever, ..R },
    ),
    (
        "in-progress-expiring",
        "an in-progress record that expires after 60 s, after which the operation is taken as new, with a new key",
        Flaws { claim: ClaimRule::InProgressExpiring, key: KeyRule::PerAttempt, look_before_retry: false, ..R },
    ),
    ("no-reconciliation", "no reconciliation job: an unknown outcome stays unknown forever", Flaws { reconcile: false, ..R }),
    (
        "all-or-nothing",
        "every step inline in the handler's transaction: when the export fails, the retry sends the email again",
        Flaws { consumer: ConsumerRule::AllOrNothing, ..R },
    ),
    (
        "flag-claim",
        "the charge claimed by `payment_started` alone, with no operation record: a crash after the gateway accepted cannot be recovered",
        Flaws { consumer: ConsumerRule::FlagClaim, ..R },
    ),
];
