//! Invariants, checked against the real final state of PostgreSQL and the recorded history.
//! Like Jepsen's checkers, they never ask the scheduler what it meant to do.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use sqlx::Row;
use uuid::Uuid;

use crate::sim::admin::Admin;
use crate::sim::history::{Fact, History, QueueRole};
use crate::sim::world::Names;
use crate::sut::messages::PaymentCaptured;
use crate::sut::reference::{consumer::CONSUMER, downstream::DOWNSTREAM};

/// The outcome of one invariant.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    /// The invariant, e.g. `exactly one payout per payment`.
    pub invariant: &'static str,
    /// Whether it holds.
    pub holds: bool,
    /// What was found (labels, not raw ids); empty when it holds trivially.
    pub detail: String,
    /// For a violation: what its first problem (in the order of `detail`) is about, so that
    /// a report can point at the step that broke it. Not serialized: it holds per-run ids.
    #[serde(skip)]
    pub culprit: Option<Culprit>,
}

/// What a violation is about: the message identities concerned (`event_id`s or `outbox_id`s)
/// and whether there is too much of an effect or too little.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Culprit {
    /// Identities of the messages whose handling the problem concerns.
    pub identities: Vec<Uuid>,
    /// The kind of problem.
    pub kind: CulpritKind,
}

/// How a violation shows in the final state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CulpritKind {
    /// An effect committed more than once (payouts, outbox rows, settlements, a balance).
    Excess,
    /// An effect missing: lost, never published, a dedup row without its effect.
    Missing,
    /// Work left in flight after the drain.
    Stuck,
}

/// One problem found by an invariant: its text (labels) and what it is about.
struct Problem(String, Culprit);

fn problem(text: String, kind: CulpritKind, identities: impl IntoIterator<Item = Uuid>) -> Problem {
    Problem(text, Culprit { identities: identities.into_iter().collect(), kind })
}

/// The invariants' names, in the order they are checked.
pub const INVARIANTS: [&str; 9] = [
    "exactly one payout per payment",
    "one processed_message per (consumer, event)",
    "one outbox row per causation",
    "every outbox event published at least once",
    "downstream effect exactly once per outbox id",
    "nothing lost: every sent event has its effect or sits in the failure transport",
    "no dedup row without its effect",
    "quiescence: every message deleted or parked",
    "merchant balance equals the sum of its payouts",
];

struct State {
    payouts: BTreeMap<Uuid, i64>,
    dedup: Vec<(String, Uuid)>,
    outbox: Vec<(Uuid, Uuid)>,
    settlements: BTreeMap<Uuid, i64>,
    parked: BTreeMap<Uuid, String>,
    balances: Vec<(Uuid, i64, i64)>,
}

async fn read_state(admin: &Admin) -> Result<State> {
    let pg = &admin.pg;
    let payouts = sqlx::query("SELECT source_payment_id, count(*) FROM merchant_payout GROUP BY 1")
        .fetch_all(pg).await?
        .into_iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect::<Result<_, sqlx::Error>>()?;
    let dedup = sqlx::query("SELECT consumer_name, message_id FROM processed_message ORDER BY 1, 2")
        .fetch_all(pg).await?
        .into_iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect::<Result<_, sqlx::Error>>()?;
    let outbox = sqlx::query("SELECT id, causation_id FROM outbox_event ORDER BY created_at, id")
        .fetch_all(pg).await?
        .into_iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect::<Result<_, sqlx::Error>>()?;
    let settlements = sqlx::query("SELECT outbox_id, count(*) FROM settlement_entry GROUP BY 1")
        .fetch_all(pg).await?
        .into_iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect::<Result<_, sqlx::Error>>()?;
    let parked = sqlx::query("SELECT message_id, reason FROM failed_message ORDER BY id")
        .fetch_all(pg).await?
        .into_iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect::<Result<_, sqlx::Error>>()?;
    let balances = sqlx::query(
        "SELECT b.merchant_id, b.available_minor, \
                COALESCE((SELECT sum(p.amount_minor) FROM merchant_payout p WHERE p.merchant_id = b.merchant_id), 0)::bigint \
         FROM merchant_balance b ORDER BY 1",
    )
    .fetch_all(pg).await?
    .into_iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?))).collect::<Result<_, sqlx::Error>>()?;
    Ok(State { payouts, dedup, outbox, settlements, parked, balances })
}

/// A verdict from its problems, sorted: they come from maps keyed by per-run UUIDs, and the
/// printed detail must not depend on them.
fn verdict(invariant: &'static str, mut problems: Vec<Problem>) -> Verdict {
    problems.sort_by(|a, b| a.0.cmp(&b.0));
    let detail = problems.iter().map(|p| p.0.as_str()).collect::<Vec<_>>().join("; ");
    let culprit = problems.into_iter().next().map(|p| p.1);
    Verdict { invariant, holds: culprit.is_none(), detail, culprit }
}

/// Checks every invariant. `events` maps the scenario's events (to find an event's payment);
/// `not_quiescent` is the drain's liveness finding. Errors: PostgreSQL cannot be read.
pub fn check(
    admin: &Admin,
    history: &History,
    events: &[(String, PaymentCaptured)],
    names: &Names,
    not_quiescent: Option<&str>,
) -> Result<Vec<Verdict>> {
    let st = admin.rt.block_on(read_state(admin))?;
    let n = |id: &Uuid| names.uuid(id);
    let payment_of: BTreeMap<Uuid, Uuid> = events.iter().map(|(_, e)| (e.event_id, e.payment_id)).collect();
    let mut sent_events = BTreeSet::new();
    let mut published = BTreeSet::new();
    for f in history.facts() {
        if let Fact::Sent { queue, identity, .. } = f {
            match queue {
                QueueRole::Payments => sent_events.insert(*identity),
                QueueRole::Payouts => published.insert(*identity),
            };
        }
    }
    let payout_count = |p: &Uuid| st.payouts.get(p).copied().unwrap_or(0);
    let events_of = |p: &Uuid| -> Vec<Uuid> {
        events.iter().filter(|(_, e)| &e.payment_id == p).map(|(_, e)| e.event_id).collect()
    };
    use CulpritKind::{Excess, Missing, Stuck};

    let mut v = Vec::new();
    // 1. exactly one payout per payment
    let mut problems = Vec::new();
    let payments: BTreeSet<Uuid> = sent_events.iter().filter_map(|e| payment_of.get(e).copied()).collect();
    for (p, c) in &st.payouts {
        if *c > 1 {
            problems.push(problem(format!("payment {} has {c} payouts", n(p)), Excess, events_of(p)));
        }
    }
    for p in &payments {
        let all_parked = sent_events
            .iter()
            .filter(|e| payment_of.get(e) == Some(p))
            .all(|e| st.parked.contains_key(e));
        if payout_count(p) == 0 && !all_parked {
            problems.push(problem(format!("payment {} has no payout", n(p)), Missing, events_of(p)));
        }
    }
    v.push(verdict(INVARIANTS[0], problems));
    // 2. one processed_message per (consumer, event)
    let mut seen = BTreeMap::new();
    for (c, m) in &st.dedup {
        *seen.entry((c.clone(), *m)).or_insert(0) += 1;
    }
    let problems = seen
        .iter()
        .filter(|(_, c)| **c > 1)
        .map(|((c, m), k)| problem(format!("{c} has {k} rows for {}", n(m)), Excess, [*m]))
        .collect();
    v.push(verdict(INVARIANTS[1], problems));
    // 3. one outbox row per causation
    let mut per_cause = BTreeMap::new();
    for (_, cause) in &st.outbox {
        *per_cause.entry(*cause).or_insert(0) += 1;
    }
    let problems = per_cause
        .iter()
        .filter(|(_, c)| **c > 1)
        .map(|(e, c)| problem(format!("{} caused {c} outbox rows", n(e)), Excess, [*e]))
        .collect();
    v.push(verdict(INVARIANTS[2], problems));
    // 4. every outbox event published at least once
    let problems = st
        .outbox
        .iter()
        .filter(|(id, _)| !published.contains(id))
        .map(|(id, cause)| problem(format!("outbox row {} (from {}) was never sent", n(id), n(cause)), Missing, [*id, *cause]))
        .collect();
    v.push(verdict(INVARIANTS[3], problems));
    // 5. downstream effect exactly once per outbox id
    let mut problems: Vec<Problem> = st
        .outbox
        .iter()
        .filter_map(|(id, _)| {
            let c = st.settlements.get(id).copied().unwrap_or(0);
            let kind = if c > 1 { Excess } else { Missing };
            (c != 1).then(|| problem(format!("publication {} applied {c} times", n(id)), kind, [*id]))
        })
        .collect();
    let known: BTreeSet<Uuid> = st.outbox.iter().map(|(id, _)| *id).collect();
    for id in st.settlements.keys().filter(|id| !known.contains(id)) {
        problems.push(problem(format!("settlement for unknown publication {}", n(id)), Excess, [*id]));
    }
    v.push(verdict(INVARIANTS[4], problems));
    // 6. nothing lost: the event's effect committed (its outbox row, written in the same
    // transaction as the payout) or it sits in the failure transport with a reason.
    let caused: BTreeSet<Uuid> = st.outbox.iter().map(|(_, cause)| *cause).collect();
    let problems = sent_events
        .iter()
        .filter(|e| {
            let parked = st.parked.get(e).map(|r| !r.trim().is_empty()).unwrap_or(false);
            !caused.contains(e) && !parked
        })
        .map(|e| problem(format!("event {} has no effect and is not in the failure transport", n(e)), Missing, [*e]))
        .collect();
    v.push(verdict(INVARIANTS[5], problems));
    // 7. no dedup row without its effect
    let mut problems = Vec::new();
    for (c, m) in &st.dedup {
        let ok = if c == CONSUMER {
            caused.contains(m)
        } else if c == DOWNSTREAM {
            st.settlements.contains_key(m)
        } else {
            true
        };
        if !ok && !payment_of.contains_key(m) && !known.contains(m) {
            problems.push(problem(format!("{c} recorded {}, which is no message's identity", n(m)), Missing, [*m]));
        } else if !ok {
            problems.push(problem(format!("{c} recorded {} as processed but its effect is missing", n(m)), Missing, [*m]));
        }
    }
    v.push(verdict(INVARIANTS[6], problems));
    // 8. quiescence
    let stuck = not_quiescent.map(|s| vec![problem(s.to_string(), Stuck, [])]).unwrap_or_default();
    v.push(verdict(INVARIANTS[7], stuck));
    // 9. balances, where a system keeps them
    let problems = st
        .balances
        .iter()
        .filter(|(_, bal, paid)| bal != paid)
        .map(|(m, bal, paid)| {
            let of_merchant = events.iter().filter(|(_, e)| &e.merchant_id == m).map(|(_, e)| e.event_id);
            let kind = if bal > paid { Excess } else { Missing };
            problem(format!("merchant {} has a balance of {bal} for payouts of {paid}", n(m)), kind, of_merchant)
        })
        .collect();
    v.push(verdict(INVARIANTS[8], problems));
    Ok(v)
}
