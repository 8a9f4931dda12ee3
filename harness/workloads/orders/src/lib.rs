//! The orders article's order system as a crashpoint workload: effects outside the database.
//!
//! An `OrderCompleted` event is handled by committing the order's local effects (the invoice,
//! one stock decrement) together with records of three follow-up operations, each with its
//! own identity: the confirmation email (mail provider), the invoice export (accounting
//! system) and the charge (payment gateway). An operation processor claims each operation
//! atomically and calls its provider with the operation id as the idempotency key; a timeout,
//! a lost response or a 5xx leaves the outcome `unknown`, and a reconciliation job looks the
//! operation up by id and resolves it.
//!
//! The providers ([`providers`]) run as turmoil hosts on the simulated network, where the
//! nemesis drops, delays and partitions messages. PostgreSQL and SQS stay real.
//!
//! The orders article's four identities, in the field's terms: the **transport message** (the SQS
//! message, `m1`; redelivered at least once), the **business operation** (`operations`, the
//! idempotency key sent to the provider), the **attempt** (a claim of the operation,
//! `attempts`; never part of the key) and the **effect** (the provider's ledger entry:
//! `ch1`, `inv1`, `msg1`).

pub mod handlers;
pub mod invariants;
pub mod mutants;
pub mod operations;
pub mod providers;
pub mod replay;

use std::rc::Rc;

use crashpoint::Invariant;
use crashpoint::Labels;
use crashpoint::Provider;
use crashpoint::System;
use crashpoint::{
    derive_id, event_specs, CrashPoint, Event, Leftover, QueueSpec, RoleKind, RoleSpec, SystemInfo, Workload,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::handlers::{Flaws, OrdersSystem};
use crate::operations::{operation_id, Purpose};

/// The schema (`fixtures/orders.sql`).
pub const SCHEMA_SQL: &str = include_str!("../../../../fixtures/orders.sql");

/// The stock of `sku-1` the schema starts with.
pub const STOCK_START: i64 = 100;

/// The queue `OrderCompleted` is sent to (labels `m1`, `m2`, …).
pub const ORDERS: &str = "orders";

/// The crash points, by role.
pub mod points {
    use super::CrashPoint;
    /// The producer's SendMessage returned.
    pub const AFTER_SEND: CrashPoint = "after_send";
    /// The consumer's inbox claim returned, inside its transaction.
    pub const AFTER_CLAIM: CrashPoint = "after_claim";
    /// The consumer committed; DeleteMessage has not been called.
    pub const AFTER_COMMIT: CrashPoint = "after_commit";
    /// A provider call returned (or gave up): its outcome is not recorded yet.
    pub const AFTER_CALL: CrashPoint = "after_call";
    /// The processor's claim of an operation returned; the provider is not called yet.
    pub const AFTER_LEASE: CrashPoint = "after_lease";
    /// The reconciliation job's lookup returned; its result is not recorded yet.
    pub const AFTER_LOOKUP: CrashPoint = "after_lookup";
}

/// `OrderCompleted` (the orders article).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderCompleted {
    /// The event's identity, the key of the inbox.
    pub event_id: Uuid,
    /// The order completed.
    pub order_id: Uuid,
    /// Its amount, cents.
    pub amount: i64,
}

/// One `[[events]]` table: `name` (e.g. `e1`) and `amount` (cents, default 4200).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventSpec {
    name: String,
    #[serde(default = "default_amount")]
    amount: i64,
}

fn default_amount() -> i64 {
    4200
}

/// The orders article's order system.
#[derive(Debug, Clone, Copy, Default)]
pub struct Orders;

impl Workload for Orders {
    fn name(&self) -> &'static str {
        "orders"
    }

    fn about(&self) -> &'static str {
        "the orders article: OrderCompleted → invoice, stock, and operations to a payment gateway, an accounting export and a mail provider"
    }

    fn queues(&self) -> Vec<QueueSpec> {
        vec![QueueSpec::new(ORDERS, "m")]
    }

    fn roles(&self) -> Vec<RoleSpec> {
        use points::*;
        vec![
            RoleSpec {
                prefix: "p",
                kind: RoleKind::Producer,
                points: &[AFTER_SEND],
                about: "producer of OrderCompleted",
            },
            RoleSpec {
                prefix: "c",
                kind: RoleKind::Handler { queue: ORDERS },
                points: &[AFTER_CLAIM, AFTER_COMMIT, AFTER_CALL],
                about: "OrderCompleted consumer (local effects and operation records)",
            },
            RoleSpec {
                prefix: "o",
                kind: RoleKind::Poller,
                points: &[AFTER_LEASE, AFTER_CALL],
                about: "operation processor (calls the providers)",
            },
            RoleSpec {
                prefix: "rec",
                kind: RoleKind::Poller,
                points: &[AFTER_LOOKUP],
                about: "reconciliation job (looks unknown outcomes up by id)",
            },
        ]
    }

    fn events(&self, specs: &[toml::Table], namespace: Uuid, names: &mut Labels) -> Result<Vec<Event>, String> {
        let mut out = Vec::new();
        for e in event_specs::<EventSpec>(specs)? {
            let ev = OrderCompleted {
                event_id: derive_id(namespace, "event", &e.name),
                order_id: derive_id(namespace, "order", &e.name),
                amount: e.amount,
            };
            let n = e.name.trim_start_matches('e');
            names.set(ev.event_id, &e.name);
            names.set(ev.order_id, &format!("o{n}"));
            for p in Purpose::ALL {
                names.set(operation_id(ev.order_id, p), &format!("{}-o{n}", p.as_str()));
            }
            let body = serde_json::to_value(&ev).map_err(|err| err.to_string())?;
            out.push(Event { label: e.name, identity: ev.event_id, body });
        }
        Ok(out)
    }

    fn identity(&self, body: &serde_json::Value) -> Option<(&'static str, Uuid)> {
        let id = body.get("event_id")?.as_str()?.parse().ok()?;
        Some((ORDERS, id))
    }

    fn leftovers(&self) -> Vec<Leftover> {
        vec![Leftover {
            what: "unresolved operation(s)",
            count_sql: "SELECT count(*) FROM operations WHERE state IN ('pending', 'unknown', 'in_progress') AND parked_reason IS NULL",
            due_sql: Some(
                "SELECT min(claimed_until) FROM operations WHERE state IN ('pending', 'in_progress') AND parked_reason IS NULL",
            ),
        }]
    }

    fn faults(&self) -> Vec<Box<dyn crashpoint::WorkloadFault>> {
        vec![Box::new(replay::ManualReplay)]
    }

    fn invariants(&self) -> Vec<Box<dyn Invariant>> {
        invariants::all()
    }

    fn providers(&self) -> Vec<Rc<dyn Provider>> {
        vec![Rc::new(providers::gateway()), Rc::new(providers::accounting()), Rc::new(providers::mail())]
    }

    fn systems(&self) -> Vec<SystemInfo> {
        let mut out = vec![SystemInfo::reference("the orders article's rules: operation ids as keys, an atomic claim with a lease, unknown outcomes reconciled")];
        out.extend(mutants::CATALOGUE.iter().map(|v| v.info));
        out
    }

    fn system(&self, name: &str) -> Option<Rc<dyn System>> {
        if name == "reference" {
            return Some(Rc::new(OrdersSystem { name: "reference", flaws: Flaws::REFERENCE }));
        }
        mutants::CATALOGUE
            .iter()
            .find(|v| v.info.name == name)
            .map(|v| Rc::new(OrdersSystem { name: v.info.name, flaws: v.flaws }) as Rc<dyn System>)
    }
}
