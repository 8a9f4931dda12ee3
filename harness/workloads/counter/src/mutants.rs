//! The counter workload's catalogue: known-bad handlers of the counter article that the
//! harness must catch, and a harmless variant it must not.

use std::rc::Rc;

use async_trait::async_trait;
use crashpoint::{CallError, Cx, System, SystemInfo, Val};

use crate::handlers::{
    claim, increment, CounterSystem, Deduplicated, Effect, EventHandler, ORDER_COUNTER, RECEIPT_WRITER,
};
use crate::{points, OrderPlaced};

/// The order counter without a claim: a redelivery counts the order again.
struct NoDedup;

#[async_trait(?Send)]
impl EventHandler for NoDedup {
    async fn handle(&self, cx: &mut Cx, ev: &OrderPlaced) -> Result<(), CallError> {
        cx.begin().await?;
        increment(cx, ev).await?;
        cx.commit().await
    }
}

/// The claim committed on its own: a crash before the increment loses it for good.
struct SeparateTx;

#[async_trait(?Send)]
impl EventHandler for SeparateTx {
    async fn handle(&self, cx: &mut Cx, ev: &OrderPlaced) -> Result<(), CallError> {
        cx.begin().await?;
        let claimed = claim(cx, ev, ORDER_COUNTER).await?;
        cx.commit().await?;
        cx.crash_point(points::AFTER_CLAIM);
        if !claimed {
            return Ok(());
        }
        cx.begin().await?;
        increment(cx, ev).await?;
        cx.commit().await
    }
}

/// One system of the catalogue besides the reference: what it is, and the handlers it
/// subscribes to `OrderPlaced`. Registered here only: `systems()` and `system()` read
/// [`CATALOGUE`].
pub struct Variant {
    /// Its name, what it does, and whether it must pass or be caught.
    pub info: SystemInfo,
    handlers: fn() -> Vec<Rc<dyn EventHandler>>,
}

fn receipts() -> Rc<dyn EventHandler> {
    Rc::new(Deduplicated { name: RECEIPT_WRITER, effect: Effect::Receipt })
}

/// The catalogue, in the order `crashpoint catalogue` explores it.
pub const CATALOGUE: &[Variant] = &[
    Variant {
        info: SystemInfo::mutant("increment-without-dedup", "the order counter increments with no processed_messages claim"),
        handlers: || vec![Rc::new(NoDedup), receipts()],
    },
    Variant {
        info: SystemInfo::mutant("dedup-by-event-only", "both handlers claim under the event id alone: the second is skipped and its receipt lost"),
        // One key for the event, whichever handler claims it.
        handlers: || {
            vec![
                Rc::new(Deduplicated { name: "order-placed", effect: Effect::Count }),
                Rc::new(Deduplicated { name: "order-placed", effect: Effect::Receipt }),
            ]
        },
    },
    Variant {
        info: SystemInfo::mutant("dedup-separate-tx", "the order counter commits its claim in a transaction of its own, before the increment"),
        handlers: || vec![Rc::new(SeparateTx), receipts()],
    },
    Variant {
        info: SystemInfo::mutant(
            "read-then-write-count",
            "the order counter reads the customer's count, then writes it back plus one: two orders of one customer handled at once count once (a lost update, between two calls with no crash point marked)",
        ),
        handlers: || vec![Rc::new(ReadThenWrite), receipts()],
    },
    Variant {
        info: SystemInfo::harmless(
            "lookup-before-claim",
            "each handler looks its (event, handler) row up before its transaction and skips a duplicate it finds; the claim in the transaction still decides a race",
        ),
        handlers: || {
            vec![
                Rc::new(LookupFirst(Deduplicated { name: ORDER_COUNTER, effect: Effect::Count })),
                Rc::new(LookupFirst(Deduplicated { name: RECEIPT_WRITER, effect: Effect::Receipt })),
            ]
        },
    },
];

/// The order counter with its claim, and a read-modify-write for its effect: the count read
/// (a yield point named `read_count`), then written back plus one (`write_count`). Under READ
/// COMMITTED, a second worker that read the same count before the first committed overwrites
/// its increment (PostgreSQL, "Transaction Isolation": a lost update). Its window lies between
/// two calls, where the code marks no crash point.
struct ReadThenWrite;

#[async_trait(?Send)]
impl EventHandler for ReadThenWrite {
    async fn handle(&self, cx: &mut Cx, ev: &OrderPlaced) -> Result<(), CallError> {
        use sqlx::Row;
        cx.begin().await?;
        let claimed = claim(cx, ev, ORDER_COUNTER).await?;
        cx.crash_point(points::AFTER_CLAIM);
        if claimed {
            let row = cx
                .fetch_optional(
                    "read_count",
                    "SELECT order_count FROM customer_stats WHERE customer_id = $1",
                    &[Val::Uuid(ev.customer_id)],
                )
                .await?;
            let n: i64 = row.map(|r| r.try_get(0)).transpose()?.unwrap_or(0);
            cx.execute(
                "write_count",
                "INSERT INTO customer_stats (customer_id, order_count) VALUES ($1, $2) \
                 ON CONFLICT (customer_id) DO UPDATE SET order_count = EXCLUDED.order_count",
                &[Val::Uuid(ev.customer_id), Val::I64(n + 1)],
            )
            .await?;
        }
        cx.commit().await
    }
}

/// A handler done right, behind a lookup: when `processed_messages` already holds (event,
/// handler) (a yield point named `lookup`), the duplicate is skipped without a transaction;
/// otherwise the handler runs, its claim deciding between two deliveries that both found
/// nothing.
struct LookupFirst(Deduplicated);

#[async_trait(?Send)]
impl EventHandler for LookupFirst {
    async fn handle(&self, cx: &mut Cx, ev: &OrderPlaced) -> Result<(), CallError> {
        let seen = cx
            .fetch_optional(
                "lookup",
                "SELECT 1 FROM processed_messages WHERE event_id = $1 AND handler = $2",
                &[Val::Uuid(ev.event_id), Val::Text(self.0.name.into())],
            )
            .await?
            .is_some();
        if seen {
            cx.note(format!("{} found {} handled: duplicate, no transaction", self.0.name, ev.event_id));
            return Ok(());
        }
        self.0.handle(cx, ev).await
    }
}

/// The system of the catalogue named `name`, if any.
pub fn by_name(name: &str) -> Option<Rc<dyn System>> {
    let v = CATALOGUE.iter().find(|v| v.info.name == name)?;
    Some(Rc::new(CounterSystem::new(v.info.name, (v.handlers)())))
}
