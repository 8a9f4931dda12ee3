//! The handlers of the orders article's order system, written as it prescribes, with the knobs its
//! mutants turn ([`Flaws`]): one code path, so that a mutant differs from the reference in
//! exactly the rule it gets wrong.
//!
//! - [`consumer`]: `OrderCompleted` → the local effects and the operation records, in one
//!   transaction with the inbox row; then DeleteMessage.
//! - [`processor`]: the operation processor: an atomic claim with a lease, the provider call
//!   under the operation id, the outcome recorded (`unknown` when there was no answer).
//! - [`reconciler`]: the reconciliation job: looks `unknown` operations up by id.

pub mod consumer;
pub mod processor;
pub mod reconciler;

use std::borrow::Cow;
use std::rc::Rc;

use crashpoint::{Program, SendEach, System};

use crate::{points, ORDERS, SCHEMA_SQL};

/// The idempotency key an operation's request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRule {
    /// The operation id (the reference).
    Operation,
    /// A new key per attempt: `v5(operation_id, "attempt-<n>")`.
    PerAttempt,
    /// A hash of the whole request, which carries the attempt number.
    RequestHash,
}

/// How the processor claims an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimRule {
    /// `claimed_until = now + 60 s` on a pending operation; the outcome is recorded after the
    /// call (the reference).
    Lease,
    /// `state = 'in_progress'` before the call, never expiring.
    InProgressForever,
    /// `state = 'in_progress'` before the call, expiring after 60 s, after which the
    /// operation is taken as new.
    InProgressExpiring,
}

/// What the processor does when a call got no answer (or a 5xx).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUnknown {
    /// `state = 'unknown'`, for reconciliation (the reference).
    Reconcile,
    /// `state = 'failed'` and a new operation for the same purpose.
    NewOperation,
}

/// How the consumer handles `OrderCompleted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerRule {
    /// Local effects plus operation records in one transaction (the reference).
    Operations,
    /// Every step inline, in the handler's transaction: a failure retries all of them.
    AllOrNothing,
    /// The charge inline after the commit, claimed by `payment_started` alone.
    FlagClaim,
    /// The claim and the local effects commit, then the operation records commit in a
    /// transaction of their own: a crash between the two commits loses the operations.
    OperationsAfterCommit,
}

/// The rules a system follows; [`Flaws::REFERENCE`] gets them all right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flaws {
    /// The idempotency key.
    pub key: KeyRule,
    /// The processor's claim.
    pub claim: ClaimRule,
    /// An unknown outcome.
    pub on_unknown: OnUnknown,
    /// Whether the reconciliation job resolves `unknown` operations.
    pub reconcile: bool,
    /// Whether a retry (an attempt after the first) looks the operation up by id before
    /// calling again: an earlier attempt may have been applied, and its key may have expired
    /// at the provider since (the gateway keeps keys 24 h).
    pub look_before_retry: bool,
    /// The consumer.
    pub consumer: ConsumerRule,
    /// Whether the consumer looks the event up in `processed_messages` before its
    /// transaction and deletes a duplicate it finds there without opening one (harmless: the
    /// claim in the transaction still decides a race).
    pub inbox_lookup_first: bool,
}

impl Flaws {
    /// The orders article's rules.
    pub const REFERENCE: Flaws = Flaws {
        key: KeyRule::Operation,
        claim: ClaimRule::Lease,
        on_unknown: OnUnknown::Reconcile,
        reconcile: true,
        look_before_retry: true,
        consumer: ConsumerRule::Operations,
        inbox_lookup_first: false,
    };
}

/// An order system: a name and its rules.
pub struct OrdersSystem {
    /// `reference` or the mutant's name.
    pub name: &'static str,
    /// Its rules.
    pub flaws: Flaws,
}

impl System for OrdersSystem {
    fn name(&self) -> &str {
        self.name
    }

    fn schema_sql(&self) -> Cow<'_, str> {
        Cow::Borrowed(SCHEMA_SQL)
    }

    fn program(&self, role: &str) -> Option<Program> {
        let flaws = self.flaws;
        match role {
            "p" => Some(Program::Producer(Rc::new(SendEach { queue: ORDERS, after_send: points::AFTER_SEND }))),
            "c" => Some(Program::Handler(Rc::new(consumer::Consumer { flaws }))),
            "o" => Some(Program::Poller(Rc::new(processor::Processor { flaws }))),
            "rec" => Some(Program::Poller(Rc::new(reconciler::Reconciler { enabled: flaws.reconcile }))),
            _ => None,
        }
    }
}
