//! The catalogue: each mutant gets one of the orders article's rules wrong; a harmless variant
//! differs from the reference and is still correct. The three that mint a new
//! key for an attempt also treat the attempt as new, so they do not look the operation up
//! before retrying (a handler that kept the operation's identity would have).

use crashpoint::SystemInfo;

use crate::handlers::{ClaimRule, ConsumerRule, Flaws, KeyRule, OnUnknown};

const R: Flaws = Flaws::REFERENCE;

/// One system of the catalogue besides the reference: what it is and the rules it follows.
/// Registered here only: `systems()` and `system()` read [`CATALOGUE`].
pub struct Variant {
    /// Its name, what it does, and whether it must pass or be caught.
    pub info: SystemInfo,
    /// Its rules.
    pub flaws: Flaws,
}

const fn mutant(name: &'static str, about: &'static str, flaws: Flaws) -> Variant {
    Variant { info: SystemInfo::mutant(name, about), flaws }
}

/// The catalogue, in the order `crashpoint catalogue` explores it.
pub const CATALOGUE: &[Variant] = &[
    mutant("key-per-attempt", "a new idempotency key on each attempt: a retry after the provider applied charges again", Flaws { key: KeyRule::PerAttempt, look_before_retry: false, ..R }),
    mutant("key-hashes-request", "the idempotency key hashed from the whole request, which carries the attempt number", Flaws { key: KeyRule::RequestHash, look_before_retry: false, ..R }),
    mutant("timeout-is-failure", "a timeout or a 5xx taken as a failure: the operation is failed and a new one created and charged again", Flaws { on_unknown: OnUnknown::NewOperation, ..R }),
    mutant("in-progress-forever", "an in-progress record written before the call that never expires: a crash or a timeout leaves the operation stuck", Flaws { claim: ClaimRule::InProgressForever, ..R }),
    mutant("in-progress-expiring", "an in-progress record that expires after 60 s, after which the operation is taken as new, with a new key", Flaws { claim: ClaimRule::InProgressExpiring, key: KeyRule::PerAttempt, look_before_retry: false, ..R }),
    mutant("no-reconciliation", "no reconciliation job: an unknown outcome stays unknown forever", Flaws { reconcile: false, ..R }),
    mutant("all-or-nothing", "every step inline in the handler's transaction: when the export fails, the retry sends the email again", Flaws { consumer: ConsumerRule::AllOrNothing, ..R }),
    mutant("flag-claim", "the charge claimed by `payment_started` alone, with no operation record: a crash after the gateway accepted cannot be recovered", Flaws { consumer: ConsumerRule::FlagClaim, ..R }),
    mutant(
        "operations-after-commit",
        "the claim and the local effects commit, then the operation records in a transaction of their own: a crash between the two commits, where no crash point is marked, loses the charge, the export and the email",
        Flaws { consumer: ConsumerRule::OperationsAfterCommit, ..R },
    ),
    Variant {
        info: SystemInfo::harmless(
            "inbox-lookup-first",
            "the consumer looks the event up in processed_messages before its transaction and deletes a duplicate it finds; the claim still decides a race",
        ),
        flaws: Flaws { inbox_lookup_first: true, ..R },
    },
];
