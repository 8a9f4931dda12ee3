//! Known-bad handlers (mutants) that the harness must catch. Each one replaces one role of
//! the [`super::reference::Reference`] system, and possibly its schema.

mod check_then_insert;
mod no_dedup;

use std::rc::Rc;

use super::reference::{self, DedupProducer, DedupRetention, OutboxRelay, SettlementProjection};
use super::*;

pub use check_then_insert::CheckThenInsertConsumer;
pub use no_dedup::NoDedupConsumer;

/// The reference system with some roles and the schema replaced.
pub struct Mutant {
    name: &'static str,
    schema: String,
    consumer: Rc<dyn Consumer>,
}

impl System for Mutant {
    fn name(&self) -> &str {
        self.name
    }
    fn schema_sql(&self) -> &str {
        &self.schema
    }
    fn producer(&self) -> Rc<dyn Producer> {
        Rc::new(DedupProducer)
    }
    fn consumer(&self) -> Rc<dyn Consumer> {
        self.consumer.clone()
    }
    fn relay(&self) -> Rc<dyn Relay> {
        Rc::new(OutboxRelay)
    }
    fn downstream(&self) -> Rc<dyn Downstream> {
        Rc::new(SettlementProjection)
    }
    fn retention(&self) -> Rc<dyn Retention> {
        Rc::new(DedupRetention)
    }
}

/// The reference schema without the payout's business unique constraint.
pub fn schema_without_payout_unique() -> String {
    let s = reference::SCHEMA_SQL.replace(
        ",\n    CONSTRAINT uq_payout_source_payment UNIQUE (source_payment_id)",
        "",
    );
    assert_ne!(s, reference::SCHEMA_SQL, "the payout constraint moved in fixtures/schema.sql");
    s
}

/// The mutants' names, with what each does wrong.
pub const CATALOGUE: &[(&str, &str)] = &[
    ("no-dedup", "no processed_message claim, and no unique constraint on the payout"),
    ("check-then-insert", "SELECT EXISTS on the payout, then INSERT, with no unique constraint"),
];

/// The mutant named `name`, if any.
pub fn by_name(name: &str) -> Option<Rc<dyn System>> {
    match name {
        "no-dedup" => Some(Rc::new(Mutant {
            name: "no-dedup",
            schema: schema_without_payout_unique(),
            consumer: Rc::new(NoDedupConsumer),
        })),
        "check-then-insert" => Some(Rc::new(Mutant {
            name: "check-then-insert",
            schema: schema_without_payout_unique(),
            consumer: Rc::new(CheckThenInsertConsumer),
        })),
        _ => None,
    }
}
