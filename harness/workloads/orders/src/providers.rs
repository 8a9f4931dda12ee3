//! The orders article's three providers, as one idempotent HTTP API configured three ways:
//!
//! | provider | request | deduplication |
//! |---|---|---|
//! | `gateway` (payment gateway) | `POST /charges` with `Idempotency-Key` | the same key with the same parameters returns the stored charge; with other parameters it is a 409 conflict; keys are kept [`KEY_RETENTION_MS`] (Stripe keeps them 24 h) |
//! | `accounting` (accounting export) | `PUT /invoices/{operation_id}` | idempotent by id, forever |
//! | `mail` (mail provider) | `POST /messages` with `Idempotency-Key` | honoured only inside [`MAIL_WINDOW_MS`], as mail APIs document: outside it the email is sent again (the orders article: "not a universal guarantee") |
//!
//! Every API answers lookups by operation id (`GET /charges?operation_id=…`,
//! `GET /invoices/{id}`, `GET /messages?operation_id=…`), which reconciliation uses. State is
//! kept in memory, per schedule, and survives a restart of the provider's host (its database
//! is durable). References are counters (`ch1`, `inv1`, `msg1`): nothing random.

use std::cell::RefCell;

use crashpoint::{Effect, Handled, Provider, Reply, Request};
use serde_json::json;

/// How long the gateway keeps an idempotency key, logical ms (24 h, as Stripe).
pub const KEY_RETENTION_MS: u64 = 24 * 3_600_000;
/// The mail provider's deduplication window, logical ms (10 min).
pub const MAIL_WINDOW_MS: u64 = 10 * 60_000;

/// The payment gateway's name.
pub const GATEWAY: &str = "gateway";
/// The accounting system's name.
pub const ACCOUNTING: &str = "accounting";
/// The mail provider's name.
pub const MAIL: &str = "mail";

/// Where a request's idempotency key comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyFrom {
    /// The `Idempotency-Key` header of a `POST /<collection>`.
    Header,
    /// The id in `PUT /<collection>/{id}`.
    Path,
}

/// One key the API remembers: when it was first used, the parameters, the reference.
#[derive(Debug, Clone)]
struct Remembered {
    key: String,
    t_ms: u64,
    body: serde_json::Value,
    reference: String,
}

/// An idempotent HTTP API: one collection, one way to take keys, a retention, a conflict rule.
pub struct Api {
    name: &'static str,
    about: &'static str,
    collection: &'static str,
    prefix: &'static str,
    key_from: KeyFrom,
    /// How long a key deduplicates, logical ms (`None`: forever).
    retention_ms: Option<u64>,
    /// Whether a key reused with other parameters is a 409 conflict (else a replay).
    conflict: bool,
    keys: RefCell<Vec<Remembered>>,
    effects: RefCell<Vec<Effect>>,
}

impl Api {
    /// The payment gateway.
    pub fn gateway() -> Api {
        Api::new(
            GATEWAY,
            "payment gateway: POST /charges with Idempotency-Key (kept 24 h; other parameters → 409)",
            "charges",
            "ch",
            KeyFrom::Header,
            Some(KEY_RETENTION_MS),
            true,
        )
    }

    /// The accounting export.
    pub fn accounting() -> Api {
        Api::new(
            ACCOUNTING,
            "accounting export: PUT /invoices/{operation_id}, idempotent by id",
            "invoices",
            "inv",
            KeyFrom::Path,
            None,
            false,
        )
    }

    /// The mail provider.
    pub fn mail() -> Api {
        Api::new(
            MAIL,
            "mail provider: POST /messages, Idempotency-Key honoured inside a 10 min window only",
            "messages",
            "msg",
            KeyFrom::Header,
            Some(MAIL_WINDOW_MS),
            false,
        )
    }

    fn new(
        name: &'static str,
        about: &'static str,
        collection: &'static str,
        prefix: &'static str,
        key_from: KeyFrom,
        retention_ms: Option<u64>,
        conflict: bool,
    ) -> Api {
        Api {
            name,
            about,
            collection,
            prefix,
            key_from,
            retention_ms,
            conflict,
            keys: Default::default(),
            effects: Default::default(),
        }
    }

    fn lookup(&self, pick: impl Fn(&Effect) -> bool) -> Handled {
        match self.effects.borrow().iter().find(|e| pick(e)) {
            Some(e) => Handled {
                reply: Reply::new(200, json!({"id": e.reference, "operation_id": e.body["operation_id"]})),
                text: format!("lookup: {}", e.reference),
            },
            None => Handled { reply: Reply::new(404, json!({"error": "not found"})), text: "lookup: not found".into() },
        }
    }

    fn apply(&self, key: String, body: &serde_json::Value, now: u64) -> Handled {
        let live = |r: &&Remembered| r.key == key && self.retention_ms.is_none_or(|ms| now < r.t_ms + ms);
        if !key.is_empty() {
            if let Some(r) = self.keys.borrow().iter().rev().find(live) {
                if self.conflict && &r.body != body {
                    let text = format!("key {key} reused with other parameters: conflict");
                    return Handled {
                        reply: Reply::new(409, json!({"error": "idempotency key reused with different parameters"})),
                        text,
                    };
                }
                return Handled {
                    reply: Reply::new(200, json!({"id": r.reference, "replayed": true})),
                    text: format!("key {key} replayed: {}", r.reference),
                };
            }
        }
        let reference = format!("{}{}", self.prefix, self.effects.borrow().len() + 1);
        self.effects.borrow_mut().push(Effect {
            provider: self.name,
            t_ms: now,
            reference: reference.clone(),
            key: key.clone(),
            body: body.clone(),
        });
        self.keys.borrow_mut().push(Remembered {
            key: key.clone(),
            t_ms: now,
            body: body.clone(),
            reference: reference.clone(),
        });
        let under = if key.is_empty() { "without a key".to_string() } else { format!("under key {key}") };
        Handled { reply: Reply::new(201, json!({"id": reference})), text: format!("{reference} applied {under}") }
    }
}

impl Provider for Api {
    fn name(&self) -> &'static str {
        self.name
    }

    fn about(&self) -> &'static str {
        self.about
    }

    fn handle(&self, req: &Request, now_ms: u64) -> Handled {
        let parts: Vec<&str> = req.path.trim_start_matches('/').split('/').collect();
        let here = parts.first() == Some(&self.collection);
        match (req.method.as_str(), parts.as_slice(), self.key_from) {
            ("GET", [_], _) if here => match req.query.get("operation_id") {
                Some(op) => self.lookup(|e| e.body["operation_id"].as_str() == Some(op.as_str())),
                None => Handled {
                    reply: Reply::new(400, json!({"error": "operation_id is required"})),
                    text: "lookup without operation_id".into(),
                },
            },
            ("GET", [_, id], _) if here => self.lookup(|e| e.key == *id),
            ("POST", [_], KeyFrom::Header) if here => {
                self.apply(req.headers.get("idempotency-key").cloned().unwrap_or_default(), &req.body, now_ms)
            }
            ("PUT", [_, id], KeyFrom::Path) if here => self.apply(id.to_string(), &req.body, now_ms),
            _ => Handled {
                reply: Reply::new(404, json!({"error": "no such route"})),
                text: format!("no route {} {}", req.method, req.path),
            },
        }
    }

    fn effects(&self) -> Vec<Effect> {
        self.effects.borrow().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charge(key: &str, amount: i64) -> Request {
        Request::new("POST", "/charges")
            .header("Idempotency-Key", key)
            .json(json!({"operation_id": "op", "amount": amount}))
    }

    #[test]
    fn the_gateway_replays_a_key_conflicts_on_other_parameters_and_forgets_after_24h() {
        let g = Api::gateway();
        assert_eq!(g.handle(&charge("k", 5), 0).reply.status, 201);
        assert_eq!(g.handle(&charge("k", 5), 1000).reply, Reply::new(200, json!({"id": "ch1", "replayed": true})));
        assert_eq!(g.handle(&charge("k", 6), 1000).reply.status, 409);
        assert_eq!(g.effects().len(), 1);
        assert_eq!(g.handle(&charge("k", 5), KEY_RETENTION_MS).reply.status, 201, "a key past its retention is new");
        assert_eq!(g.effects().len(), 2);
        let found = g.handle(&Request::new("GET", "/charges").query("operation_id", "op"), 0);
        assert_eq!(found.reply.status, 200);
        assert_eq!(g.handle(&Request::new("GET", "/charges").query("operation_id", "other"), 0).reply.status, 404);
    }

    #[test]
    fn the_mail_provider_deduplicates_inside_its_window_only() {
        let m = Api::mail();
        let send = Request::new("POST", "/messages").header("Idempotency-Key", "k").json(json!({"operation_id": "op"}));
        m.handle(&send, 0);
        m.handle(&send, MAIL_WINDOW_MS - 1);
        assert_eq!(m.effects().len(), 1);
        m.handle(&send, MAIL_WINDOW_MS);
        assert_eq!(m.effects().len(), 2);
        let no_key = Request::new("POST", "/messages").json(json!({"operation_id": "op"}));
        m.handle(&no_key, 0);
        m.handle(&no_key, 0);
        assert_eq!(m.effects().len(), 4, "without a key nothing is deduplicated");
    }

    #[test]
    fn accounting_is_idempotent_by_id_and_answers_lookups_by_id() {
        let a = Api::accounting();
        let put = Request::new("PUT", "/invoices/op1").json(json!({"operation_id": "op1"}));
        assert_eq!(a.handle(&put, 0).reply.status, 201);
        assert_eq!(a.handle(&put, 99 * KEY_RETENTION_MS).reply.status, 200);
        assert_eq!(a.effects().len(), 1);
        assert_eq!(a.handle(&Request::new("GET", "/invoices/op1"), 0).reply.status, 200);
        assert_eq!(a.handle(&Request::new("GET", "/invoices/op2"), 0).reply.status, 404);
    }
}
