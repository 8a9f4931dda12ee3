//! The order system's invariants (the orders article), over the final state of PostgreSQL and the
//! providers' ledgers ([`CheckCx::effects`]), never over what the scheduler meant to do.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use crashpoint::Effect;
use crashpoint::Fact;
use crashpoint::{decide, CheckCx, CulpritKind, Invariant, Problem, Verdict};
use sqlx::Row;
use uuid::Uuid;

use crate::operations::Purpose;
use crate::providers::{ACCOUNTING, GATEWAY, MAIL, MAIL_WINDOW_MS};
use crate::OrderCompleted;

/// The events the history sent, by order id.
fn sent(cx: &CheckCx) -> Result<BTreeMap<Uuid, OrderCompleted>> {
    let sent: BTreeSet<Uuid> = cx
        .history
        .facts()
        .filter_map(|f| match f {
            Fact::Sent { identity, .. } => Some(*identity),
            _ => None,
        })
        .collect();
    let events: Vec<OrderCompleted> = cx.events.iter().map(|e| e.decode()).collect::<Result<_, _>>()?;
    Ok(events.into_iter().filter(|e| sent.contains(&e.event_id)).map(|e| (e.order_id, e)).collect())
}

/// The order of an effect (its body's `order_id`).
fn order_of(e: &Effect) -> Option<Uuid> {
    e.body["order_id"].as_str()?.parse().ok()
}

/// The event id of `order`, for culprits.
fn event_of(cx: &CheckCx, order: Uuid) -> Vec<Uuid> {
    cx.events
        .iter()
        .filter_map(|e| e.decode::<OrderCompleted>().ok())
        .filter(|e| e.order_id == order)
        .map(|e| e.event_id)
        .collect()
}

/// The effects of `provider`, by order.
fn by_order<'e>(cx: &'e CheckCx, provider: &str) -> BTreeMap<Uuid, Vec<&'e Effect>> {
    let mut out: BTreeMap<Uuid, Vec<&Effect>> = BTreeMap::new();
    for e in cx.effects.iter().filter(|e| e.provider == provider) {
        out.entry(order_of(e).unwrap_or_default()).or_default().push(e);
    }
    out
}

fn refs(es: &[&Effect]) -> String {
    es.iter().map(|e| e.reference.as_str()).collect::<Vec<_>>().join(", ")
}

/// At most one charge per order at the gateway: one authorised payment.
struct OneCharge;
const ONE_CHARGE: &str = "at most one charge per order at the gateway";

impl Invariant for OneCharge {
    fn name(&self) -> String {
        ONE_CHARGE.into()
    }
    fn check(&self, cx: &CheckCx) -> Verdict {
        let problems = by_order(cx, GATEWAY)
            .into_iter()
            .filter(|(_, es)| es.len() > 1)
            .map(|(o, es)| {
                Problem::new(
                    format!("order {} charged {} times ({})", cx.label(&o), es.len(), refs(&es)),
                    CulpritKind::Excess,
                    event_of(cx, o),
                )
            })
            .collect();
        Verdict::from_problems(ONE_CHARGE, problems)
    }
}

/// Exactly one accounting record per invoice (at most one when its export is parked).
struct OneExport;
const ONE_EXPORT: &str = "exactly one accounting record per invoice";

impl Invariant for OneExport {
    fn name(&self) -> String {
        ONE_EXPORT.into()
    }
    fn check(&self, cx: &CheckCx) -> Verdict {
        decide(
            ONE_EXPORT,
            (|| {
                let mut invoices: BTreeMap<Uuid, bool> = BTreeMap::new();
                let sql = "SELECT i.order_id, EXISTS (SELECT 1 FROM operations o WHERE o.order_id = i.order_id \
                       AND o.purpose = 'export' AND o.parked_reason IS NOT NULL) FROM invoices i";
                for r in cx.rows(sql)? {
                    invoices.insert(r.try_get(0)?, r.try_get(1)?);
                }
                let exports = by_order(cx, ACCOUNTING);
                let orders: BTreeSet<Uuid> = invoices.keys().chain(exports.keys()).copied().collect();
                let mut problems = Vec::new();
                for o in orders {
                    let es = exports.get(&o).cloned().unwrap_or_default();
                    let (has_invoice, parked) = (invoices.contains_key(&o), invoices.get(&o) == Some(&true));
                    let text = match (has_invoice, es.len()) {
                        (true, 1) => continue,
                        (true, 0) if parked => continue,
                        (true, 0) => format!("invoice of order {} has no accounting record", cx.label(&o)),
                        (true, n) => {
                            format!("invoice of order {} has {n} accounting records ({})", cx.label(&o), refs(&es))
                        }
                        (false, _) => {
                            format!("accounting has {} for order {}, which has no invoice", refs(&es), cx.label(&o))
                        }
                    };
                    let kind = if es.is_empty() { CulpritKind::Missing } else { CulpritKind::Excess };
                    problems.push(Problem::new(text, kind, event_of(cx, o)));
                }
                Ok(problems)
            })(),
        )
    }
}

/// No email sent twice inside the mail provider's deduplication window. A duplicate outside
/// it is counted and reported in the verdict, not hidden: the provider's deduplication is not
/// a universal guarantee (the orders article).
struct NoDoubleEmail;
const NO_DOUBLE_EMAIL: &str = "no email sent twice inside the mail provider's dedup window";

impl Invariant for NoDoubleEmail {
    fn name(&self) -> String {
        NO_DOUBLE_EMAIL.into()
    }
    fn check(&self, cx: &CheckCx) -> Verdict {
        let mut problems = Vec::new();
        let mut outside = Vec::new();
        for (o, mut es) in by_order(cx, MAIL) {
            es.sort_by_key(|e| e.t_ms);
            for pair in es.windows(2) {
                let dt = pair[1].t_ms.abs_diff(pair[0].t_ms);
                let text = format!(
                    "order {}: {} then {} {} s later",
                    cx.label(&o),
                    pair[0].reference,
                    pair[1].reference,
                    dt / 1000
                );
                if dt < MAIL_WINDOW_MS {
                    problems.push(Problem::new(text, CulpritKind::Excess, event_of(cx, o)));
                } else {
                    outside.push(text);
                }
            }
        }
        let mut v = Verdict::from_problems(NO_DOUBLE_EMAIL, problems);
        if v.holds && !outside.is_empty() {
            v.detail = format!("{} duplicate email(s) outside the window, sent: {}", outside.len(), outside.join("; "));
        }
        v
    }
}

/// After the drain and reconciliation, no operation is pending, unknown or in progress,
/// unless it is parked for a person with a reason.
struct Resolved;
const RESOLVED: &str = "every operation resolved or parked with a reason";

impl Invariant for Resolved {
    fn name(&self) -> String {
        RESOLVED.into()
    }
    fn check(&self, cx: &CheckCx) -> Verdict {
        decide(
            RESOLVED,
            (|| {
                let sql = "SELECT operation_id, purpose, order_id, state FROM operations \
                       WHERE state IN ('pending', 'unknown', 'in_progress') AND parked_reason IS NULL ORDER BY seq";
                let mut problems = Vec::new();
                for r in cx.rows(sql)? {
                    let (id, purpose, order, state): (Uuid, String, Uuid, String) =
                        (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
                    let text = format!("{purpose} {} of order {} left {state}", cx.label(&id), cx.label(&order));
                    problems.push(Problem::new(text, CulpritKind::Stuck, event_of(cx, order)));
                }
                Ok(problems)
            })(),
        )
    }
}

/// Every local `succeeded` has its provider effect, and every provider effect has its local
/// operation (by operation id, `succeeded` or parked).
struct LedgersAgree;
const LEDGERS: &str = "local operations and provider ledgers agree";

impl Invariant for LedgersAgree {
    fn name(&self) -> String {
        LEDGERS.into()
    }
    fn check(&self, cx: &CheckCx) -> Verdict {
        decide(
            LEDGERS,
            (|| {
                let sql = "SELECT operation_id, purpose, order_id, state, coalesce(provider_ref, ''), parked_reason IS NOT NULL FROM operations";
                let mut ops: BTreeMap<Uuid, (String, Uuid, String, String, bool)> = BTreeMap::new();
                for r in cx.rows(sql)? {
                    ops.insert(
                        r.try_get(0)?,
                        (r.try_get(1)?, r.try_get(2)?, r.try_get(3)?, r.try_get(4)?, r.try_get(5)?),
                    );
                }
                let mut problems = Vec::new();
                for (id, (purpose, order, state, reference, _)) in &ops {
                    let provider = Purpose::parse(purpose).map(|p| p.provider()).unwrap_or_default();
                    if state == "succeeded"
                        && !cx.effects.iter().any(|e| e.provider == provider && &e.reference == reference)
                    {
                        let text = format!(
                            "{purpose} {} of order {} succeeded locally, but {provider} has no {reference:?}",
                            cx.label(id),
                            cx.label(order)
                        );
                        problems.push(Problem::new(text, CulpritKind::Missing, event_of(cx, *order)));
                    }
                }
                for e in cx.effects {
                    let op: Option<Uuid> = e.body["operation_id"].as_str().and_then(|s| s.parse().ok());
                    let known = op.and_then(|id| ops.get(&id)).is_some_and(|(p, _, state, _, parked)| {
                        Purpose::parse(p).is_ok_and(|p| p.provider() == e.provider) && (state == "succeeded" || *parked)
                    });
                    if !known {
                        let order = order_of(e).unwrap_or_default();
                        let text = format!(
                            "{} {} of order {} has no local operation that succeeded",
                            e.provider,
                            e.reference,
                            cx.label(&order)
                        );
                        problems.push(Problem::new(text, CulpritKind::Missing, event_of(cx, order)));
                    }
                }
                Ok(problems)
            })(),
        )
    }
}

/// The business invariant: one invoice and one stock decrement per order sent.
struct OnePerOrder;
const ONE_PER_ORDER: &str = "one invoice and one stock decrement per order";

impl Invariant for OnePerOrder {
    fn name(&self) -> String {
        ONE_PER_ORDER.into()
    }
    fn check(&self, cx: &CheckCx) -> Verdict {
        decide(
            ONE_PER_ORDER,
            (|| {
                let sent = sent(cx)?;
                let invoiced: BTreeSet<Uuid> =
                    cx.rows("SELECT order_id FROM invoices")?.iter().map(|r| r.try_get(0)).collect::<Result<_, _>>()?;
                let mut problems = Vec::new();
                for (o, ev) in &sent {
                    if !invoiced.contains(o) {
                        problems.push(Problem::new(
                            format!("order {} has no invoice", cx.label(o)),
                            CulpritKind::Missing,
                            [ev.event_id],
                        ));
                    }
                }
                let quantity: i64 = cx
                    .rows("SELECT quantity FROM stock WHERE sku = 'sku-1'")?
                    .first()
                    .map(|r| r.try_get(0))
                    .transpose()?
                    .unwrap_or(0);
                let decrements = crate::STOCK_START - quantity;
                if decrements != invoiced.len() as i64 {
                    let kind =
                        if decrements > invoiced.len() as i64 { CulpritKind::Excess } else { CulpritKind::Missing };
                    problems.push(Problem::new(
                        format!("stock decremented {decrements} times for {} invoiced order(s)", invoiced.len()),
                        kind,
                        sent.values().map(|e| e.event_id),
                    ));
                }
                Ok(problems)
            })(),
        )
    }
}

/// Every invariant, in check order.
pub fn all() -> Vec<Box<dyn Invariant>> {
    vec![
        Box::new(OneCharge),
        Box::new(OneExport),
        Box::new(NoDoubleEmail),
        Box::new(Resolved),
        Box::new(LedgersAgree),
        Box::new(OnePerOrder),
    ]
}
