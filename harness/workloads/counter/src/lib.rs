//! The counter article's counter projection as a crashpoint workload: one `OrderPlaced` event, two
//! handlers on the event bus (an order counter and a receipt writer), each recording the event
//! in `processed_messages (event_id, handler)` in the same transaction as its effect.
//!
//! This workload is the engine's second user: it was added as one crate and one folder of
//! scenarios, without an edit to the engine.

pub mod handlers;
pub mod invariants;
pub mod mutants;

use std::any::Any;
use std::rc::Rc;

use crashpoint::Invariant;
use crashpoint::Labels;
use crashpoint::System;
use crashpoint::{derive_id, event_specs, CrashPoint, Event, QueueSpec, RoleKind, RoleSpec, SystemInfo, Workload};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The schema (`fixtures/counter.sql`).
pub const SCHEMA_SQL: &str = include_str!("../../../../fixtures/counter.sql");

/// The queue the producer sends `OrderPlaced` to (labels `m1`, `m2`, …).
pub const ORDERS: &str = "orders";

/// The crash points of the consumer, in pipeline order.
pub mod points {
    use super::CrashPoint;
    /// A message was received, no handler ran yet.
    pub const AFTER_RECEIVE: CrashPoint = "after_receive";
    /// A handler's `processed_messages` claim returned (passed once per handler).
    pub const AFTER_CLAIM: CrashPoint = "after_claim";
    /// The first handler committed, the second has not started.
    pub const BETWEEN_HANDLERS: CrashPoint = "between_handlers";
    /// Every handler committed; DeleteMessage has not been called.
    pub const AFTER_COMMIT: CrashPoint = "after_commit";
    /// The producer's SendMessage returned.
    pub const AFTER_SEND: CrashPoint = "after_send";
}

/// `OrderPlaced` (the counter article): a fact with zero or more handlers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderPlaced {
    /// The event's identity, the key of `processed_messages`.
    pub event_id: Uuid,
    /// The order placed.
    pub order_id: Uuid,
    /// The customer whose order count goes up by one.
    pub customer_id: Uuid,
}

/// The handlers' policy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CounterConfig {
    /// Delay before a failed message is received again, logical s (0: at the visibility
    /// timeout).
    pub retry_delay_s: u64,
}

/// One `[[events]]` table: `name` (e.g. `e1`) and `customer` (e.g. `cu1`, default `cu1`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventSpec {
    name: String,
    #[serde(default = "default_customer")]
    customer: String,
}

fn default_customer() -> String {
    "cu1".into()
}

/// The counter article's counter projection.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counter;

impl Workload for Counter {
    fn name(&self) -> &'static str {
        "counter"
    }

    fn about(&self) -> &'static str {
        "the counter article: OrderPlaced → an order counter and a receipt writer, each deduplicating under its own name"
    }

    fn queues(&self) -> Vec<QueueSpec> {
        vec![QueueSpec::new(ORDERS, "m")]
    }

    fn roles(&self) -> Vec<RoleSpec> {
        use points::*;
        vec![
            RoleSpec { prefix: "p", kind: RoleKind::Producer, points: &[AFTER_SEND], about: "producer of OrderPlaced" },
            RoleSpec {
                prefix: "c",
                kind: RoleKind::Handler { queue: ORDERS },
                points: &[AFTER_RECEIVE, AFTER_CLAIM, BETWEEN_HANDLERS, AFTER_COMMIT],
                about: "event-bus worker running both handlers",
            },
        ]
    }

    fn config(&self, table: toml::Table) -> Result<Rc<dyn Any>, String> {
        let c: CounterConfig =
            toml::Value::Table(table).try_into().map_err(|e: toml::de::Error| e.message().to_string())?;
        Ok(Rc::new(c))
    }

    fn events(&self, specs: &[toml::Table], namespace: Uuid, names: &mut Labels) -> Result<Vec<Event>, String> {
        let mut out = Vec::new();
        for e in event_specs::<EventSpec>(specs)? {
            let ev = OrderPlaced {
                event_id: derive_id(namespace, "event", &e.name),
                order_id: derive_id(namespace, "order", &e.name),
                customer_id: derive_id(namespace, "customer", &e.customer),
            };
            names.set(ev.event_id, &e.name);
            names.set(ev.order_id, &format!("o{}", e.name.trim_start_matches('e')));
            names.set(ev.customer_id, &e.customer);
            let body = serde_json::to_value(&ev).map_err(|err| err.to_string())?;
            out.push(Event { label: e.name, identity: ev.event_id, body });
        }
        Ok(out)
    }

    fn identity(&self, body: &serde_json::Value) -> Option<(&'static str, Uuid)> {
        let id = body.get("event_id")?.as_str()?.parse().ok()?;
        Some((ORDERS, id))
    }

    fn invariants(&self) -> Vec<Box<dyn Invariant>> {
        invariants::all()
    }

    fn systems(&self) -> Vec<SystemInfo> {
        let mut out = vec![SystemInfo::reference(
            "the counter article's handlers: a claim per (event, handler) in the effect's transaction",
        )];
        out.extend(mutants::CATALOGUE.iter().map(|v| v.info));
        out
    }

    fn system(&self, name: &str) -> Option<Rc<dyn System>> {
        if name == "reference" {
            return Some(Rc::new(handlers::CounterSystem::reference()));
        }
        mutants::by_name(name)
    }
}
