//! The reference handlers of the counter article and the event-bus worker that runs them.
//!
//! The worker receives one `OrderPlaced`, runs every handler subscribed to it in order, each in
//! its own transaction (Doctrine's `transactional`), then deletes the message. A handler that
//! fails rolls back its own transaction; the message comes back after its retry delay and every
//! handler runs again, so each must be idempotent on its own: it claims
//! `processed_messages (event_id, handler)` with `ON CONFLICT DO NOTHING` in the transaction of
//! its effect (the counter article, "I record each processed event ID under a unique key, in the same
//! transaction as the side effect").

use std::borrow::Cow;
use std::rc::Rc;

use async_trait::async_trait;
use crashpoint::{CallError, Cx, Delivery, Handler, Program, SendEach, System, Val};

use crate::{points, CounterConfig, OrderPlaced, ORDERS, SCHEMA_SQL};

/// One handler subscribed to `OrderPlaced`: its whole unit of work, transaction included.
#[async_trait(?Send)]
pub trait EventHandler {
    /// Runs it for `ev`. The caller rolls back on error.
    async fn handle(&self, cx: &mut Cx, ev: &OrderPlaced) -> Result<(), CallError>;
}

/// `handler` of the order counter in `processed_messages`.
pub const ORDER_COUNTER: &str = "order-counter";
/// `handler` of the receipt writer in `processed_messages`.
pub const RECEIPT_WRITER: &str = "receipt-writer";

/// Claims (`event_id`, `handler`), a yield point named `claim`; false for a duplicate.
pub async fn claim(cx: &mut Cx, ev: &OrderPlaced, handler: &str) -> Result<bool, CallError> {
    let row = cx
        .fetch_optional(
            "claim",
            "INSERT INTO processed_messages (event_id, handler, processed_at) VALUES ($1, $2, $3) \
             ON CONFLICT DO NOTHING RETURNING event_id",
            &[Val::Uuid(ev.event_id), Val::Text(handler.into()), Val::Now],
        )
        .await?;
    Ok(row.is_some())
}

/// `order_count = order_count + 1` for the customer (an upsert), a yield point named `count`.
pub async fn increment(cx: &mut Cx, ev: &OrderPlaced) -> Result<(), CallError> {
    cx.execute(
        "count",
        "INSERT INTO customer_stats (customer_id, order_count) VALUES ($1, 1) \
         ON CONFLICT (customer_id) DO UPDATE SET order_count = customer_stats.order_count + 1",
        &[Val::Uuid(ev.customer_id)],
    )
    .await
    .map(|_| ())
}

/// Inserts the order's receipt, a yield point named `receipt`.
pub async fn write_receipt(cx: &mut Cx, ev: &OrderPlaced) -> Result<(), CallError> {
    cx.execute(
        "receipt",
        "INSERT INTO receipt (event_id, order_id, customer_id) VALUES ($1, $2, $3)",
        &[Val::Uuid(ev.event_id), Val::Uuid(ev.order_id), Val::Uuid(ev.customer_id)],
    )
    .await
    .map(|_| ())
}

/// A handler done right: claim under `name`, then `effect`, in one transaction.
pub struct Deduplicated {
    /// The handler's name in `processed_messages`.
    pub name: &'static str,
    /// Its effect: [`increment`] or [`write_receipt`].
    pub effect: Effect,
}

/// The effect of a handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// The order counter's increment.
    Count,
    /// The receipt writer's insert.
    Receipt,
}

impl Effect {
    /// Applies it (one statement, inside the caller's transaction).
    pub async fn apply(self, cx: &mut Cx, ev: &OrderPlaced) -> Result<(), CallError> {
        match self {
            Effect::Count => increment(cx, ev).await,
            Effect::Receipt => write_receipt(cx, ev).await,
        }
    }
}

#[async_trait(?Send)]
impl EventHandler for Deduplicated {
    async fn handle(&self, cx: &mut Cx, ev: &OrderPlaced) -> Result<(), CallError> {
        cx.begin().await?;
        let claimed = claim(cx, ev, self.name).await?;
        cx.crash_point(points::AFTER_CLAIM);
        if claimed {
            self.effect.apply(cx, ev).await?;
        } else {
            cx.note(format!("{} already handled {}: duplicate, no effect", self.name, ev.event_id));
        }
        cx.commit().await
    }
}

/// The event-bus worker: every handler in order, then DeleteMessage.
pub struct Bus {
    handlers: Vec<Rc<dyn EventHandler>>,
}

#[async_trait(?Send)]
impl Handler for Bus {
    async fn on_delivery(&self, cx: &mut Cx, d: Delivery) -> Result<(), CallError> {
        let ev: OrderPlaced =
            serde_json::from_str(&d.body).map_err(|e| CallError::Unrecoverable(format!("OrderPlaced: {e}")))?;
        cx.crash_point(points::AFTER_RECEIVE);
        for (i, h) in self.handlers.iter().enumerate() {
            if i > 0 {
                cx.crash_point(points::BETWEEN_HANDLERS);
            }
            if let Err(e) = h.handle(cx, &ev).await {
                cx.rollback().await?;
                let delay = cx.config::<CounterConfig>().retry_delay_s;
                if delay > 0 {
                    cx.change_visibility("retry", &d, delay).await?;
                }
                return Err(e);
            }
        }
        cx.crash_point(points::AFTER_COMMIT);
        cx.delete(&d).await
    }
}

/// A counter system: a name and the handlers subscribed to `OrderPlaced`.
pub struct CounterSystem {
    name: &'static str,
    handlers: Vec<Rc<dyn EventHandler>>,
}

impl CounterSystem {
    /// The reference: the order counter and the receipt writer, each deduplicated under its
    /// own name.
    pub fn reference() -> CounterSystem {
        CounterSystem {
            name: "reference",
            handlers: vec![
                Rc::new(Deduplicated { name: ORDER_COUNTER, effect: Effect::Count }),
                Rc::new(Deduplicated { name: RECEIPT_WRITER, effect: Effect::Receipt }),
            ],
        }
    }

    /// A system named `name` with these handlers.
    pub fn new(name: &'static str, handlers: Vec<Rc<dyn EventHandler>>) -> CounterSystem {
        CounterSystem { name, handlers }
    }
}

impl System for CounterSystem {
    fn name(&self) -> &str {
        self.name
    }
    fn schema_sql(&self) -> Cow<'_, str> {
        Cow::Borrowed(SCHEMA_SQL)
    }
    fn program(&self, role: &str) -> Option<Program> {
        match role {
            "p" => Some(Program::Producer(Rc::new(SendEach { queue: ORDERS, after_send: points::AFTER_SEND }))),
            "c" => Some(Program::Handler(Rc::new(Bus { handlers: self.handlers.clone() }))),
            _ => None,
        }
    }
}
