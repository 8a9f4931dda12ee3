//! Known-bad handlers of the counter article that the harness must catch.

use std::rc::Rc;

use async_trait::async_trait;
use crashpoint::{CallError, Cx, System};

use crate::handlers::{claim, increment, CounterSystem, Deduplicated, Effect, EventHandler, ORDER_COUNTER, RECEIPT_WRITER};
use crate::{points, OrderPlaced};

/// The mutants' names, with what each does wrong.
pub const CATALOGUE: &[(&str, &str)] = &[
    ("increment-without-dedup", "the order counter increments with no processed_messages claim"),
    ("dedup-by-event-only", "both handlers claim under the event id alone: the second is skipped and its receipt lost"),
    ("dedup-separate-tx", "the order counter commits its claim in a transaction of its own, before the increment"),
];

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

/// The mutant named `name`, if any.
pub fn by_name(name: &str) -> Option<Rc<dyn System>> {
    let (name, _) = CATALOGUE.iter().find(|(n, _)| *n == name)?;
    let receipts: Rc<dyn EventHandler> = Rc::new(Deduplicated { name: RECEIPT_WRITER, effect: Effect::Receipt });
    let handlers: Vec<Rc<dyn EventHandler>> = match *name {
        "increment-without-dedup" => vec![Rc::new(NoDedup), receipts],
        // One key for the event, whichever handler claims it.
        "dedup-by-event-only" => vec![
            Rc::new(Deduplicated { name: "order-placed", effect: Effect::Count }),
            Rc::new(Deduplicated { name: "order-placed", effect: Effect::Receipt }),
        ],
        "dedup-separate-tx" => vec![Rc::new(SeparateTx), receipts],
        _ => return None,
    };
    Some(Rc::new(CounterSystem::new(name, handlers)))
}
