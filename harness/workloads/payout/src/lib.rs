//! The payout article's payout system as a crashpoint workload.
//!
//! `PaymentCaptured` (payments queue) → the payout consumer claims `processed_message`, inserts
//! the payout under `UNIQUE (source_payment_id)` and a `MerchantPayoutCreated` outbox row in one
//! transaction → the outbox relay publishes it (payouts queue) → the downstream consumer
//! applies one settlement entry. A Redis DeduplicateStamp lock guards the dispatch; a retention
//! job purges old dedup rows; a failure transport (`failed_message`) holds parked messages and
//! can be replayed. [`reference`] is correct; [`mutants`] are known-bad variants; [`invariants`]
//! are the properties every schedule must keep.

pub mod invariants;
pub mod messages;
pub mod mutants;
pub mod points;
pub mod reference;
mod replay;
pub mod system;

use std::any::Any;
use std::rc::Rc;

use crashpoint::Invariant;
use crashpoint::Labels;
use crashpoint::System;
use crashpoint::{
    derive_id, event_specs, Event, Leftover, QueueSpec, RoleKind, RoleSpec, SystemInfo, Workload, WorkloadFault,
};
use serde::Deserialize;
use uuid::Uuid;

pub use replay::{identity_of, Replay};

/// The system named `name`: `reference`, or a mutant of [`crate::mutants::CATALOGUE`].
pub fn by_name(name: &str) -> Option<Rc<dyn System>> {
    let system: Rc<dyn system::PayoutSystem> =
        if name == "reference" { Rc::new(crate::reference::Reference) } else { crate::mutants::by_name(name)? };
    Some(Rc::new(system::AsSystem(system)))
}

pub use system::SystemConfig;

/// The payout system's queue names.
pub mod queues {
    /// `PaymentCaptured`, producer → consumers (labels `m1`, `m2`, …).
    pub const PAYMENTS: &str = "payments";
    /// `MerchantPayoutCreated`, relay → downstream (labels `x1`, `x2`, …).
    pub const PAYOUTS: &str = "payouts";
}

/// The payout article's payout system.
#[derive(Debug, Clone, Copy, Default)]
pub struct Payout;

/// One `[[events]]` table of a payout scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventSpec {
    /// Event label, e.g. `e1`; its `event_id` is derived from it.
    name: String,
    /// Payment label, e.g. `p1`; events sharing it pay the same payment.
    payment: String,
    /// Merchant label.
    #[serde(default = "default_merchant")]
    merchant: String,
    /// Amount in minor units (> 0).
    #[serde(default = "default_amount")]
    amount_minor: i64,
    /// ISO 4217 code.
    #[serde(default = "default_currency")]
    currency: String,
}

fn default_merchant() -> String {
    "mer1".into()
}
fn default_amount() -> i64 {
    12_500
}
fn default_currency() -> String {
    "EUR".into()
}

impl Workload for Payout {
    fn name(&self) -> &'static str {
        "payout"
    }

    fn about(&self) -> &'static str {
        "the payout article: PaymentCaptured → one merchant payout, a transactional outbox, a downstream settlement"
    }

    fn queues(&self) -> Vec<QueueSpec> {
        vec![QueueSpec::new(queues::PAYMENTS, "m"), QueueSpec::new(queues::PAYOUTS, "x")]
    }

    fn roles(&self) -> Vec<RoleSpec> {
        vec![
            RoleSpec {
                prefix: "p",
                kind: RoleKind::Producer,
                points: points::PRODUCER,
                about: "producer of PaymentCaptured",
            },
            RoleSpec {
                prefix: "c",
                kind: RoleKind::Handler { queue: queues::PAYMENTS },
                points: points::CONSUMER,
                about: "payout consumer",
            },
            RoleSpec { prefix: "r", kind: RoleKind::Poller, points: points::RELAY, about: "outbox relay" },
            RoleSpec {
                prefix: "d",
                kind: RoleKind::Handler { queue: queues::PAYOUTS },
                points: &[],
                about: "downstream consumer",
            },
            RoleSpec { prefix: "ret", kind: RoleKind::Periodic, points: &[], about: "dedup retention job" },
        ]
    }

    fn config(&self, table: toml::Table) -> Result<Rc<dyn Any>, String> {
        let c: SystemConfig =
            toml::Value::Table(table).try_into().map_err(|e: toml::de::Error| e.message().to_string())?;
        if !(1..=10).contains(&c.max_messages) {
            return Err(format!(
                "max_messages: expected 1 to 10 (SQS ReceiveMessage MaxNumberOfMessages), got {}",
                c.max_messages
            ));
        }
        Ok(Rc::new(c))
    }

    fn events(&self, specs: &[toml::Table], namespace: Uuid, names: &mut Labels) -> Result<Vec<Event>, String> {
        let mut out = Vec::new();
        for (i, e) in event_specs::<EventSpec>(specs)?.into_iter().enumerate() {
            if e.amount_minor <= 0 || e.currency.len() != 3 {
                return Err(format!("events[{i}] ({}): expected amount_minor > 0 and a 3-letter currency", e.name));
            }
            let ev = messages::PaymentCaptured {
                event_id: derive_id(namespace, "event", &e.name),
                payment_id: derive_id(namespace, "payment", &e.payment),
                merchant_id: derive_id(namespace, "merchant", &e.merchant),
                amount_minor: e.amount_minor,
                currency: e.currency.clone(),
                lock_token: None,
            };
            names.set(ev.event_id, &e.name);
            names.set(ev.payment_id, &e.payment);
            names.set(ev.merchant_id, &e.merchant);
            let body = serde_json::to_value(&ev).map_err(|err| err.to_string())?;
            out.push(Event { label: e.name, identity: ev.event_id, body });
        }
        Ok(out)
    }

    fn identity(&self, body: &serde_json::Value) -> Option<(&'static str, Uuid)> {
        identity_of(body)
    }

    fn leftovers(&self) -> Vec<Leftover> {
        vec![Leftover {
            what: "unpublished outbox row(s)",
            count_sql: "SELECT count(*) FROM outbox_event WHERE published_at IS NULL",
            due_sql: None,
        }]
    }

    fn invariants(&self) -> Vec<Box<dyn Invariant>> {
        invariants::all()
    }

    fn faults(&self) -> Vec<Box<dyn WorkloadFault>> {
        vec![Box::new(Replay)]
    }

    fn systems(&self) -> Vec<SystemInfo> {
        let mut out = vec![SystemInfo::reference("the payout article's design, correct under at-least-once delivery")];
        out.extend(mutants::CATALOGUE.iter().map(|v| v.info));
        out
    }

    fn system(&self, name: &str) -> Option<Rc<dyn System>> {
        by_name(name)
    }

    fn catalogue_scenario(&self) -> String {
        "payout/catalogue".into()
    }

    /// The graceful-stop mutants run on `payout/catalogue-stops` (one batch consumer,
    /// graceful stops on the menu); the others on `payout/catalogue`.
    fn catalogue_scenario_of(&self, system: &str) -> String {
        match system.starts_with("stop-") {
            true => "payout/catalogue-stops".into(),
            false => self.catalogue_scenario(),
        }
    }
}
