//! The engine's facts as tables of the schedule's schema, so that an invariant written in SQL
//! can join a system's own tables with what the history knows: "every dispatched event has its
//! invoice", "no message was deleted before its effect committed".
//!
//! For a workload that wants them ([`crate::workload::Workload::history_tables`]) the engine
//! runs [`DDL`] before the system's own; after the drain, before any invariant runs, [`fill`]
//! writes one row per dispatched event and one per message. They are ordinary tables of the schedule's schema:
//! reset with the rest of it before the namespace's next schedule.
//!
//! `crashpoint_dispatched`: the scenario's events that the producer began to dispatch
//! ([`Fact::Dispatched`]), once each.
//!
//! | column | type | what |
//! |---|---|---|
//! | `event` | `text` | the event's label in the scenario (`e1`) |
//! | `identity` | `uuid` | its stable identity (the idempotency key in the body) |
//! | `body` | `jsonb` | the body the producer dispatched |
//!
//! `crashpoint_messages`: each message SQS accepted ([`Fact::Sent`]), by label.
//!
//! | column | type | what |
//! |---|---|---|
//! | `msg` | `text` | its label (`m1`; a dead-letter copy has its own) |
//! | `queue` | `text` | the workload's queue name |
//! | `identity` | `uuid` | the identity in its body |
//! | `receives` | `integer` | receives recorded (ReceiveMessage that returned it) |
//! | `deleted` | `boolean` | a DeleteMessage (or batch entry) succeeded for it |
//! | `dead_lettered` | `boolean` | SQS moved it to a dead-letter queue (redrive policy) |
//! | `expired` | `boolean` | it outlived its queue's retention and SQS deleted it |
//!
//! `crashpoint_provider_calls`: each request to a provider ([`crate::provider::Call`]), in the
//! order they arrived: "at most one charge per order" is a `GROUP BY` over it.
//!
//! | column | type | what |
//! |---|---|---|
//! | `provider` | `text` | the provider (`cards`) |
//! | `route` | `text` | its route's label (`charge`; empty when it took none) |
//! | `idempotency_key` | `text` | its idempotency key (empty: none) |
//! | `body` | `jsonb` | its body (a form body decoded: `metadata[order_id]=…` is `{"metadata": {"order_id": …}}`) |
//! | `applied` | `boolean` | it applied an effect |
//! | `status` | `integer` | what the provider answered, even when that answer was lost; `NULL` when it never arrived |
//! | `reference` | `text` | the effect's reference when it applied one (`pi_1`) |
//! | `t_ms` | `bigint` | when it arrived, logical ms |
//!
//! `crashpoint_webhooks`: each webhook delivery a provider made to a team's endpoint
//! ([`crate::sim::net::webhook::Delivered`]), in order: "every event delivered with a 2xx was
//! applied", "an event applied once however often delivered" are SQL over it.
//!
//! | column | type | what |
//! |---|---|---|
//! | `provider` | `text` | the provider (`cards`) |
//! | `webhook` | `text` | the webhook's label (`payment_succeeded`) |
//! | `event` | `text` | the event's id (`evt_1`) |
//! | `about` | `text` | the reference of the effect it reports (`pi_1`) |
//! | `attempt` | `integer` | which delivery of the event, from 1 |
//! | `status` | `integer` | the endpoint's answer; `NULL` when none came (refused, closed, the process killed) |
//! | `body` | `jsonb` | the event body delivered |
//! | `t_ms` | `bigint` | when it was delivered, logical ms |

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use serde_json::json;

use crate::namespace::admin::Admin;
use crate::record::history::{Entry, Fact, FaultEvent, History};
use crate::spec::Event;

/// The facts tables, empty: run before the system's DDL for a workload whose
/// [`crate::workload::Workload::history_tables`] is true.
pub const DDL: &str = "CREATE TABLE crashpoint_dispatched (event text PRIMARY KEY, identity uuid NOT NULL, body jsonb NOT NULL);\n\
CREATE TABLE crashpoint_messages (msg text PRIMARY KEY, queue text NOT NULL, identity uuid NOT NULL, receives integer NOT NULL, \
deleted boolean NOT NULL, dead_lettered boolean NOT NULL, expired boolean NOT NULL);\n\
CREATE TABLE crashpoint_provider_calls (provider text NOT NULL, route text NOT NULL, idempotency_key text NOT NULL, body jsonb, \
applied boolean NOT NULL, status integer, reference text, t_ms bigint NOT NULL);\n\
CREATE TABLE crashpoint_webhooks (provider text NOT NULL, webhook text NOT NULL, event text NOT NULL, about text NOT NULL, \
attempt integer NOT NULL, status integer, body jsonb, t_ms bigint NOT NULL);\n";

/// One message's row of `crashpoint_messages`.
#[derive(Debug, Default, serde::Serialize)]
struct Message {
    msg: String,
    queue: String,
    identity: uuid::Uuid,
    receives: u32,
    deleted: bool,
    dead_lettered: bool,
    expired: bool,
}

/// The rows of both tables, from `history` and the scenario's `events`: (dispatched, messages)
/// as JSON arrays of objects keyed by column.
fn rows(history: &History, events: &[Event]) -> (serde_json::Value, serde_json::Value) {
    let mut dispatched = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut messages: BTreeMap<String, Message> = BTreeMap::new();
    for f in history.facts() {
        match f {
            Fact::Dispatched { event, identity } if seen.insert(event.clone()) => {
                let body = events.iter().find(|e| &e.label == event).map(|e| e.body.clone()).unwrap_or(serde_json::Value::Null);
                dispatched.push(json!({ "event": event, "identity": identity, "body": body }));
            }
            Fact::Sent { queue, msg, identity } => {
                let m = messages.entry(msg.clone()).or_default();
                (m.msg, m.queue, m.identity) = (msg.clone(), queue.to_string(), *identity);
            }
            Fact::Received { msg, .. } => {
                if let Some(m) = messages.get_mut(msg) {
                    m.receives += 1;
                }
            }
            Fact::Deleted { msg, .. } => {
                if let Some(m) = messages.get_mut(msg) {
                    m.deleted = true;
                }
            }
            _ => {}
        }
    }
    for e in &history.entries {
        if let Entry::Fault { fault, .. } = e {
            let (msg, expired) = match fault {
                FaultEvent::Expired { msg, found: true, .. } => (msg, true),
                FaultEvent::DeadLettered { msg, .. } => (msg, false),
                _ => continue,
            };
            if let Some(m) = messages.get_mut(msg) {
                match expired {
                    true => m.expired = true,
                    false => m.dead_lettered = true,
                }
            }
        }
    }
    let messages: Vec<serde_json::Value> = messages.into_values().filter(|m| !m.msg.is_empty()).map(|m| json!(m)).collect();
    (serde_json::Value::Array(dispatched), serde_json::Value::Array(messages))
}

/// Writes the facts of `history`, the providers' `calls` and their webhook `deliveries` into the
/// schedule's `crashpoint_dispatched`, `crashpoint_messages`, `crashpoint_provider_calls` and
/// `crashpoint_webhooks` (four statements). Errors: PostgreSQL's (the tables are missing when
/// the system's DDL left out [`DDL`]).
pub fn fill(
    admin: &Admin,
    history: &History,
    events: &[Event],
    calls: &[crate::provider::Call],
    deliveries: &[crate::sim::net::webhook::Delivered],
) -> Result<()> {
    let (dispatched, messages) = rows(history, events);
    let calls = serde_json::to_value(calls).context("the provider calls as JSON")?;
    let deliveries = serde_json::to_value(deliveries).context("the webhook deliveries as JSON")?;
    // Each table with its columns and types, filled from a JSON array of objects keyed by column.
    let tables: [(&str, &str, &serde_json::Value); 4] = [
        ("crashpoint_dispatched", "event text, identity uuid, body jsonb", &dispatched),
        (
            "crashpoint_messages",
            "msg text, queue text, identity uuid, receives integer, deleted boolean, dead_lettered boolean, expired boolean",
            &messages,
        ),
        (
            "crashpoint_provider_calls",
            "provider text, route text, idempotency_key text, body jsonb, applied boolean, status integer, reference text, t_ms bigint",
            &calls,
        ),
        (
            "crashpoint_webhooks",
            "provider text, webhook text, event text, about text, attempt integer, status integer, body jsonb, t_ms bigint",
            &deliveries,
        ),
    ];
    admin.on_pg(async {
        for (table, columns, rows) in tables {
            let names: Vec<&str> = columns.split(", ").filter_map(|c| c.split(' ').next()).collect();
            let sql = format!("INSERT INTO {table} ({}) SELECT * FROM jsonb_to_recordset($1) AS x({columns})", names.join(", "));
            sqlx::query(&sql).bind(rows).execute(&admin.pg).await.with_context(|| format!("filling {table}"))?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::history::{Outcome, Service, Step};

    fn step(facts: Vec<Fact>) -> Entry {
        Entry::Step(Step { t_ms: 0, worker: "c1".into(), op: "x".into(), service: Service::Sqs, at: None, outcome: Outcome::Done, idle: false, facts, unit: None })
    }

    #[test]
    fn rows_follow_the_history() {
        let id = uuid::Uuid::from_u128(7);
        let ev = Event { label: "e1".into(), identity: id, body: json!({"k": 1}) };
        let history = History {
            entries: vec![
                step(vec![Fact::Dispatched { event: "e1".into(), identity: id }, Fact::Sent { queue: "q", msg: "m1".into(), identity: id }]),
                step(vec![Fact::Dispatched { event: "e1".into(), identity: id }, Fact::Sent { queue: "q", msg: "m2".into(), identity: id }]),
                step(vec![Fact::Received { queue: "q", msg: "m1".into(), receive_count: 1, receipt: String::new() }]),
                step(vec![Fact::Received { queue: "q", msg: "m1".into(), receive_count: 2, receipt: String::new() }]),
                step(vec![Fact::Deleted { queue: "q", msg: "m1".into() }]),
                Entry::Fault { t_ms: 0, fault: FaultEvent::Expired { msg: "m2".into(), queue: "q", retention_ms: 1, found: true }, facts: vec![] },
            ],
            roles: Default::default(),
        };
        let (d, m) = rows(&history, &[ev]);
        assert_eq!(d, json!([{"event": "e1", "identity": id, "body": {"k": 1}}]), "an event dispatched twice is one row");
        assert_eq!(
            m,
            json!([
                {"msg": "m1", "queue": "q", "identity": id, "receives": 2, "deleted": true, "dead_lettered": false, "expired": false},
                {"msg": "m2", "queue": "q", "identity": id, "receives": 0, "deleted": false, "dead_lettered": false, "expired": true},
            ])
        );
    }
}
