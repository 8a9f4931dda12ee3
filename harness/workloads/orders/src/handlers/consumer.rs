//! The `OrderCompleted` consumer. The reference commits the order's local effects (the order,
//! its invoice, one stock decrement) together with the inbox row and the records of its
//! follow-up operations, each with its own id (the orders article: "commit the required local changes
//! with records of follow-up operations, then process those operations independently").

use async_trait::async_trait;
use crashpoint::{CallError, Cx, Delivery, Handler, Val};

use super::{ConsumerRule, Flaws};
use crate::operations::{operation_id, Operation, Purpose};
use crate::{points, OrderCompleted};

/// The order, its invoice and the stock decrement, in one statement (`$1` order, `$2`
/// amount, `$3` now).
const LOCAL_EFFECTS: &str = "WITH o AS (INSERT INTO orders (order_id, amount) VALUES ($1, $2) RETURNING order_id), \
     i AS (INSERT INTO invoices (order_id, amount, created_at) SELECT order_id, $2, $3 FROM o RETURNING order_id) \
     UPDATE stock SET quantity = quantity - 1 WHERE sku = 'sku-1' AND EXISTS (SELECT 1 FROM i)";

/// The operation records (`$1` order, `$2` amount, `$3` the purposes, `$4` their ids, `$5`
/// their states, `$6` their provider references).
const OPERATIONS: &str = "INSERT INTO operations (operation_id, purpose, order_id, params, state, provider_ref) \
     SELECT id, purpose, $1, jsonb_build_object('amount', $2::bigint), state, NULLIF(ref, '') \
     FROM unnest($3::text[], $4::uuid[], $5::text[], $6::text[]) AS v(purpose, id, state, ref)";

/// The consumer of `OrderCompleted`.
pub struct Consumer {
    /// Its rules.
    pub flaws: Flaws,
}

/// A PostgreSQL array literal of `items` (`{"a","b"}`), bound as text and cast in SQL.
fn text_array<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    format!("{{{}}}", items.into_iter().map(|s| format!("\"{}\"", s.as_ref())).collect::<Vec<_>>().join(","))
}

/// Records `ops` as operations of `ev` in states `states` with references `refs` (a yield
/// point named `operations`).
async fn record(
    cx: &mut Cx,
    ev: &OrderCompleted,
    ops: &[Purpose],
    states: &[&str],
    refs: &[String],
) -> Result<(), CallError> {
    let ids = ops.iter().map(|p| operation_id(ev.order_id, *p).to_string());
    let purposes = ops.iter().map(|p| p.as_str());
    cx.execute(
        "operations",
        OPERATIONS,
        &[
            Val::Uuid(ev.order_id),
            Val::I64(ev.amount),
            Val::Text(text_array(purposes)),
            Val::Text(text_array(ids)),
            Val::Text(text_array(states)),
            Val::Text(text_array(refs)),
        ],
    )
    .await
    .map(|_| ())
}

/// The operation of `purpose` for `ev`, first attempt.
fn operation(ev: &OrderCompleted, purpose: Purpose) -> Operation {
    Operation { id: operation_id(ev.order_id, purpose), purpose, order_id: ev.order_id, amount: ev.amount, attempts: 1 }
}

/// Calls the provider of `op` inline; the provider's reference, or an error (a 4xx/5xx is an
/// error too: the handler fails and the message comes back).
async fn call_inline(cx: &mut Cx, op: &Operation, key: Option<String>) -> Result<String, CallError> {
    let reply = cx.http(op.purpose.as_str(), op.purpose.provider(), op.request(key, op.body())).await;
    cx.crash_point(points::AFTER_CALL);
    let reply = reply?;
    match reply.status {
        200..=299 => Ok(reply.body["id"].as_str().unwrap_or_default().to_string()),
        s => Err(CallError::Service(format!("{} answered {s}", op.purpose.provider()))),
    }
}

#[async_trait(?Send)]
impl Handler for Consumer {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let ev: OrderCompleted =
            serde_json::from_str(&d.body).map_err(|e| CallError::Unrecoverable(format!("OrderCompleted: {e}")))?;
        if self.flaws.inbox_lookup_first {
            let seen = cx
                .fetch_optional(
                    "lookup",
                    "SELECT 1 FROM processed_messages WHERE event_id = $1",
                    &[Val::Uuid(ev.event_id)],
                )
                .await?
                .is_some();
            if seen {
                cx.note(format!("{} found in the inbox: duplicate, no transaction", ev.event_id));
                return cx.delete(&d).await;
            }
        }
        cx.begin().await?;
        let claimed = cx
            .fetch_optional(
                "claim",
                "INSERT INTO processed_messages (event_id, processed_at) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING event_id",
                &[Val::Uuid(ev.event_id), Val::Now],
            )
            .await?
            .is_some();
        cx.crash_point(points::AFTER_CLAIM);
        if !claimed {
            cx.note(format!("{} already handled: duplicate, no effect", ev.event_id));
        } else {
            cx.execute("effects", LOCAL_EFFECTS, &[Val::Uuid(ev.order_id), Val::I64(ev.amount), Val::Now]).await?;
            match self.flaws.consumer {
                ConsumerRule::Operations => {
                    record(cx, &ev, &Purpose::ALL, &["pending"; 3], &[String::new(), String::new(), String::new()])
                        .await?
                }
                ConsumerRule::FlagClaim => {
                    record(
                        cx,
                        &ev,
                        &[Purpose::Email, Purpose::Export],
                        &["pending"; 2],
                        &[String::new(), String::new()],
                    )
                    .await?
                }
                ConsumerRule::OperationsAfterCommit => {
                    // No crash point marked between the two transactions: only the boundary
                    // after the first `commit` reaches the window.
                    cx.commit().await?;
                    cx.begin().await?;
                    record(cx, &ev, &Purpose::ALL, &["pending"; 3], &[String::new(), String::new(), String::new()])
                        .await?
                }
                ConsumerRule::AllOrNothing => {
                    // Every step inline, inside the transaction: the email without a key of
                    // its own (the execution has no operation identity to give it).
                    let mut refs = Vec::new();
                    for p in Purpose::ALL {
                        let op = operation(&ev, p);
                        let key = (p != Purpose::Email).then(|| op.id.to_string());
                        refs.push(call_inline(cx, &op, key).await?);
                    }
                    record(cx, &ev, &Purpose::ALL, &["succeeded"; 3], &refs).await?;
                }
            }
        }
        cx.commit().await?;
        cx.crash_point(points::AFTER_COMMIT);
        if claimed && self.flaws.consumer == ConsumerRule::FlagClaim {
            flag_claimed_charge(cx, &ev).await?;
        }
        cx.delete(&d).await
    }
}

/// The orders article's flag-only claim: `payment_started` is set, the gateway called, and the charge
/// recorded only after it answered. A crash after the gateway accepted leaves the flag set
/// and nothing that can recover the payment.
async fn flag_claimed_charge(cx: &mut Cx, ev: &OrderCompleted) -> Result<(), CallError> {
    let n = cx
        .execute(
            "flag",
            "UPDATE orders SET payment_started = true WHERE order_id = $1 AND payment_started = false",
            &[Val::Uuid(ev.order_id)],
        )
        .await?;
    if n == 0 {
        cx.note("payment already started: skipped");
        return Ok(());
    }
    let op = operation(ev, Purpose::Charge);
    let reference = call_inline(cx, &op, Some(op.id.to_string())).await?;
    record(cx, ev, &[Purpose::Charge], &["succeeded"], &[reference]).await
}
