//! The counter projection's invariants (the counter article).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use crashpoint::Fact;
use crashpoint::{decide, CheckCx, CulpritKind, Invariant, Problem, Quiescence, SqlInvariant, Verdict};
use sqlx::Row;
use uuid::Uuid;

use crate::OrderPlaced;

/// The events the history sent (each must be counted and get its receipt), by id; computed
/// once per schedule and shared by the invariants.
fn sent(cx: &CheckCx) -> Result<BTreeMap<Uuid, OrderPlaced>> {
    cx.memo("counter-sent", read_sent)
}

fn read_sent(cx: &CheckCx) -> Result<BTreeMap<Uuid, OrderPlaced>> {
    let events: Vec<OrderPlaced> = cx.events.iter().map(|e| e.decode()).collect::<Result<_, _>>()?;
    let sent: BTreeSet<Uuid> = cx
        .history
        .facts()
        .filter_map(|f| match f {
            Fact::Sent { identity, .. } => Some(*identity),
            _ => None,
        })
        .collect();
    Ok(events.into_iter().filter(|e| sent.contains(&e.event_id)).map(|e| (e.event_id, e)).collect())
}

/// Each customer's `order_count` equals the number of distinct events sent for it.
struct CounterMatches;

const COUNTER: &str = "the counter equals the number of distinct events";

impl Invariant for CounterMatches {
    fn name(&self) -> String {
        COUNTER.into()
    }
    fn check(&self, cx: &CheckCx) -> Verdict {
        decide(
            COUNTER,
            (|| {
                let sent = sent(cx)?;
                let rows = cx.rows("SELECT customer_id, order_count FROM customer_stats")?;
                let mut counted: BTreeMap<Uuid, i64> = BTreeMap::new();
                for r in rows {
                    counted.insert(r.try_get(0)?, r.try_get(1)?);
                }
                let mut expected: BTreeMap<Uuid, Vec<Uuid>> = BTreeMap::new();
                for e in sent.values() {
                    expected.entry(e.customer_id).or_default().push(e.event_id);
                }
                let customers: BTreeSet<Uuid> = counted.keys().chain(expected.keys()).copied().collect();
                let mut problems = Vec::new();
                for c in customers {
                    let want = expected.get(&c).map(Vec::len).unwrap_or(0) as i64;
                    let got = counted.get(&c).copied().unwrap_or(0);
                    if want != got {
                        let kind = if got > want { CulpritKind::Excess } else { CulpritKind::Missing };
                        let ids = expected.get(&c).cloned().unwrap_or_default();
                        problems.push(Problem::new(
                            format!("customer {} counted {got} orders for {want} events", cx.label(&c)),
                            kind,
                            ids,
                        ));
                    }
                }
                Ok(problems)
            })(),
        )
    }
}

/// Every sent event has its receipt (the second handler's effect is not lost).
struct EveryReceipt;

const RECEIPTS: &str = "every event has its receipt";

impl Invariant for EveryReceipt {
    fn name(&self) -> String {
        RECEIPTS.into()
    }
    fn check(&self, cx: &CheckCx) -> Verdict {
        decide(
            RECEIPTS,
            (|| {
                let sent = sent(cx)?;
                let have: BTreeSet<Uuid> =
                    cx.rows("SELECT event_id FROM receipt")?.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?;
                Ok(sent
                    .keys()
                    .filter(|e| !have.contains(e))
                    .map(|e| Problem::new(format!("event {} has no receipt", cx.label(e)), CulpritKind::Missing, [*e]))
                    .collect())
            })(),
        )
    }
}

/// The invariants, in the order they are checked.
pub fn all() -> Vec<Box<dyn Invariant>> {
    vec![
        Box::new(CounterMatches),
        Box::new(SqlInvariant::excess(
            "at most one receipt per event",
            "SELECT event_id, count(*) AS receipts FROM receipt GROUP BY event_id HAVING count(*) > 1",
        )),
        Box::new(EveryReceipt),
        Box::new(Quiescence),
    ]
}
