//! The payout system's invariants (the payout article): checked after every schedule against the real
//! final state of PostgreSQL and the recorded history, in this order. The final state is read
//! once per schedule and shared.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use crashpoint::Fact;
use crashpoint::{decide, CheckCx, CulpritKind, Invariant, Problem, Quiescence, Verdict};
use sqlx::Row;
use uuid::Uuid;

use crate::messages::PaymentCaptured;
use crate::queues;
use crate::reference::{consumer::CONSUMER, downstream::DOWNSTREAM};

use CulpritKind::{Excess, Missing};

fn problem(text: String, kind: CulpritKind, identities: impl IntoIterator<Item = Uuid>) -> Problem {
    Problem::new(text, kind, identities)
}

#[derive(Debug, Clone)]
struct State {
    payouts: BTreeMap<Uuid, i64>,
    dedup: Vec<(String, Uuid)>,
    outbox: Vec<(Uuid, Uuid)>,
    settlements: BTreeMap<Uuid, i64>,
    parked: BTreeMap<Uuid, String>,
    balances: Vec<(Uuid, i64, i64)>,
}

async fn read_state(pg: &sqlx::PgPool) -> Result<State> {
    let payouts = sqlx::query("SELECT source_payment_id, count(*) FROM merchant_payout GROUP BY 1")
        .fetch_all(pg)
        .await?
        .into_iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, sqlx::Error>>()?;
    let dedup = sqlx::query("SELECT consumer_name, message_id FROM processed_message ORDER BY 1, 2")
        .fetch_all(pg)
        .await?
        .into_iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, sqlx::Error>>()?;
    let outbox = sqlx::query("SELECT id, causation_id FROM outbox_event ORDER BY created_at, id")
        .fetch_all(pg)
        .await?
        .into_iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, sqlx::Error>>()?;
    let settlements = sqlx::query("SELECT outbox_id, count(*) FROM settlement_entry GROUP BY 1")
        .fetch_all(pg)
        .await?
        .into_iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, sqlx::Error>>()?;
    let parked = sqlx::query("SELECT message_id, reason FROM failed_message ORDER BY id")
        .fetch_all(pg)
        .await?
        .into_iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, sqlx::Error>>()?;
    let balances = sqlx::query(
        "SELECT b.merchant_id, b.available_minor, \
                COALESCE((SELECT sum(p.amount_minor) FROM merchant_payout p WHERE p.merchant_id = b.merchant_id), 0)::bigint \
         FROM merchant_balance b ORDER BY 1",
    )
    .fetch_all(pg).await?
    .into_iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?))).collect::<Result<_, sqlx::Error>>()?;
    Ok(State { payouts, dedup, outbox, settlements, parked, balances })
}

/// What every payout invariant reads: the final state, the events and what the history sent.
#[derive(Clone)]
struct Facts {
    st: std::rc::Rc<State>,
    events: Vec<PaymentCaptured>,
    /// Events the producer began to dispatch (at least once).
    dispatched: BTreeSet<Uuid>,
    sent_events: BTreeSet<Uuid>,
    published: BTreeSet<Uuid>,
    /// Who took each dispatch lock last (key, worker, logical ms), in order.
    locks: Vec<(String, String, u64)>,
}

impl Facts {
    fn read(cx: &CheckCx) -> Result<Facts> {
        cx.memo("payout-facts", |cx| {
            let st = cx.block_on(read_state(cx.pg()))?;
            let events = cx.events.iter().map(|e| e.decode()).collect::<Result<Vec<PaymentCaptured>, _>>()?;
            let (mut sent_events, mut published, mut dispatched) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
            for f in cx.history.facts() {
                match f {
                    Fact::Sent { queue, identity, .. } if *queue == queues::PAYOUTS => {
                        published.insert(*identity);
                    }
                    Fact::Sent { identity, .. } => {
                        sent_events.insert(*identity);
                    }
                    Fact::Dispatched { identity, .. } => {
                        dispatched.insert(*identity);
                    }
                    _ => {}
                }
            }
            let locks = cx
                .history
                .steps()
                .flat_map(|s| s.facts.iter().map(move |f| (s, f)))
                .filter_map(|(s, f)| match f {
                    Fact::LockTaken { key, .. } => Some((key.clone(), s.worker.clone(), s.t_ms)),
                    _ => None,
                })
                .collect();
            Ok(Facts { st: std::rc::Rc::new(st), events, dispatched, sent_events, published, locks })
        })
    }

    fn payment_of(&self) -> BTreeMap<Uuid, Uuid> {
        self.events.iter().map(|e| (e.event_id, e.payment_id)).collect()
    }

    fn events_of(&self, p: &Uuid) -> Vec<Uuid> {
        self.events.iter().filter(|e| &e.payment_id == p).map(|e| e.event_id).collect()
    }

    /// Events that should have their effect: every event dispatched or sent.
    fn due(&self) -> BTreeSet<Uuid> {
        self.dispatched.union(&self.sent_events).copied().collect()
    }

    /// Who holds the dispatch lock of `event` (its last taker and when), for a lost dispatch.
    fn lock_holder(&self, event: &Uuid) -> Option<(String, String, u64)> {
        let key = crate::reference::lock_key(event);
        self.locks.iter().rev().find(|(k, _, _)| *k == key).cloned()
    }

    fn caused(&self) -> BTreeSet<Uuid> {
        self.st.outbox.iter().map(|(_, cause)| *cause).collect()
    }

    fn known_publications(&self) -> BTreeSet<Uuid> {
        self.st.outbox.iter().map(|(id, _)| *id).collect()
    }
}

/// One payout invariant: a name and the problems it finds in the [`Facts`].
struct PayoutInvariant {
    name: &'static str,
    problems: fn(&CheckCx, &Facts) -> Vec<Problem>,
}

impl Invariant for PayoutInvariant {
    fn name(&self) -> String {
        self.name.into()
    }
    fn check(&self, cx: &CheckCx) -> Verdict {
        decide(self.name, Facts::read(cx).map(|f| (self.problems)(cx, &f)))
    }
}

/// The invariants, in the order they are checked (quiescence is the engine's).
pub fn all() -> Vec<Box<dyn Invariant>> {
    let i = |name, problems| -> Box<dyn Invariant> { Box::new(PayoutInvariant { name, problems }) };
    vec![
        i("exactly one payout per payment", one_payout),
        i("one processed_message per (consumer, event)", one_dedup_row),
        i("one outbox row per causation", one_outbox_row),
        i("every outbox event published at least once", published),
        i("downstream effect exactly once per outbox id", downstream_once),
        i("nothing lost: every dispatched event has its effect or sits in the failure transport", nothing_lost),
        i("no dedup row without its effect", no_dedup_without_effect),
        Box::new(Quiescence),
        i("merchant balance equals the sum of its payouts", balances),
    ]
}

fn one_payout(cx: &CheckCx, f: &Facts) -> Vec<Problem> {
    let payment_of = f.payment_of();
    let payout_count = |p: &Uuid| f.st.payouts.get(p).copied().unwrap_or(0);
    let mut problems = Vec::new();
    // A payment is due a payout once one of its events was dispatched (not only once sent: a
    // dispatch the producer lost must not pass as "no payout, nothing sent").
    let payments: BTreeSet<Uuid> = f.due().iter().filter_map(|e| payment_of.get(e).copied()).collect();
    for (p, c) in &f.st.payouts {
        if *c > 1 {
            problems.push(problem(format!("payment {} has {c} payouts", cx.label(p)), Excess, f.events_of(p)));
        }
    }
    for p in &payments {
        let all_parked = f.due().iter().filter(|e| payment_of.get(e) == Some(p)).all(|e| f.st.parked.contains_key(e));
        if payout_count(p) == 0 && !all_parked {
            problems.push(problem(format!("payment {} has no payout", cx.label(p)), Missing, f.events_of(p)));
        }
    }
    problems
}

/// Every dedup row's consumer is counted: a handler that claims under another name than the
/// reference's is checked too.
fn one_dedup_row(cx: &CheckCx, f: &Facts) -> Vec<Problem> {
    let mut seen = BTreeMap::new();
    for (c, m) in &f.st.dedup {
        *seen.entry((c.clone(), *m)).or_insert(0) += 1;
    }
    seen.iter()
        .filter(|(_, c)| **c > 1)
        .map(|((c, m), k)| problem(format!("{c} has {k} rows for {}", cx.label(m)), Excess, [*m]))
        .collect()
}

fn one_outbox_row(cx: &CheckCx, f: &Facts) -> Vec<Problem> {
    let mut per_cause = BTreeMap::new();
    for (_, cause) in &f.st.outbox {
        *per_cause.entry(*cause).or_insert(0) += 1;
    }
    per_cause
        .iter()
        .filter(|(_, c)| **c > 1)
        .map(|(e, c)| problem(format!("{} caused {c} outbox rows", cx.label(e)), Excess, [*e]))
        .collect()
}

fn published(cx: &CheckCx, f: &Facts) -> Vec<Problem> {
    f.st.outbox
        .iter()
        .filter(|(id, _)| !f.published.contains(id))
        .map(|(id, cause)| {
            problem(
                format!("outbox row {} (from {}) was never sent", cx.label(id), cx.label(cause)),
                Missing,
                [*id, *cause],
            )
        })
        .collect()
}

/// A publication applied twice is a duplicate; one applied never is lost, unless the
/// downstream consumer parked it in the failure transport with a reason (its handler failed and
/// its retries ran out: a person decides, as for the payout consumer's parked events).
fn downstream_once(cx: &CheckCx, f: &Facts) -> Vec<Problem> {
    let mut problems: Vec<Problem> =
        f.st.outbox
            .iter()
            .filter_map(|(id, _)| {
                let c = f.st.settlements.get(id).copied().unwrap_or(0);
                let parked = f.st.parked.get(id).is_some_and(|r| !r.trim().is_empty());
                let kind = if c > 1 { Excess } else { Missing };
                (c > 1 || c == 0 && !parked)
                    .then(|| problem(format!("publication {} applied {c} times", cx.label(id)), kind, [*id]))
            })
            .collect();
    let known = f.known_publications();
    for id in f.st.settlements.keys().filter(|id| !known.contains(id)) {
        problems.push(problem(format!("settlement for unknown publication {}", cx.label(id)), Excess, [*id]));
    }
    problems
}

/// From the dispatch on: every event the producer began to dispatch was sent (a dispatch
/// suppressed as the duplicate of one that was sent counts as sent: they share the event id),
/// and its effect committed (its outbox row, written in the same transaction as the payout) or
/// it sits in the failure transport with a reason. A dispatch never sent is reported lost at the
/// producer, with the lock that suppressed it and who took that lock.
fn nothing_lost(cx: &CheckCx, f: &Facts) -> Vec<Problem> {
    let caused = f.caused();
    let mut problems = Vec::new();
    for e in f.due() {
        let parked = f.st.parked.get(&e).map(|r| !r.trim().is_empty()).unwrap_or(false);
        if caused.contains(&e) || parked {
            continue;
        }
        let text = if f.sent_events.contains(&e) {
            format!("event {} has no effect and is not in the failure transport", cx.label(&e))
        } else {
            let by = match f.lock_holder(&e) {
                Some((key, worker, t_ms)) => format!(
                    "its dispatch was suppressed by lock {}, taken by {worker} at {}.{:03}s",
                    cx.names.relabel(&key),
                    t_ms / 1000,
                    t_ms % 1000
                ),
                None => "no dispatch of it reached SendMessage".to_string(),
            };
            format!("event {} was dispatched and never sent: lost at the producer ({by})", cx.label(&e))
        };
        problems.push(problem(text, Missing, [e]));
    }
    problems
}

/// A dedup row under the payout consumer's name needs its outbox row, one under the
/// downstream's its settlement; a row under any other name needs one of the two (a handler
/// that claims under another name is not left unchecked).
fn no_dedup_without_effect(cx: &CheckCx, f: &Facts) -> Vec<Problem> {
    let (caused, known, payment_of) = (f.caused(), f.known_publications(), f.payment_of());
    let mut problems = Vec::new();
    for (c, m) in &f.st.dedup {
        let ok = if c == CONSUMER {
            caused.contains(m)
        } else if c == DOWNSTREAM {
            f.st.settlements.contains_key(m)
        } else {
            caused.contains(m) || f.st.settlements.contains_key(m)
        };
        if !ok && !payment_of.contains_key(m) && !known.contains(m) {
            problems.push(problem(
                format!("{c} recorded {}, which is no message's identity", cx.label(m)),
                Missing,
                [*m],
            ));
        } else if !ok {
            problems.push(problem(
                format!("{c} recorded {} as processed but its effect is missing", cx.label(m)),
                Missing,
                [*m],
            ));
        }
    }
    problems
}

fn balances(cx: &CheckCx, f: &Facts) -> Vec<Problem> {
    f.st.balances
        .iter()
        .filter(|(_, bal, paid)| bal != paid)
        .map(|(m, bal, paid)| {
            let of_merchant = f.events.iter().filter(|e| &e.merchant_id == m).map(|e| e.event_id);
            let kind = if bal > paid { Excess } else { Missing };
            problem(format!("merchant {} has a balance of {bal} for payouts of {paid}", cx.label(m)), kind, of_merchant)
        })
        .collect()
}
