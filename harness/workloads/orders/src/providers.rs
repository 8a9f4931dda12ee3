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
//!
//! The rules (keys, windows, conflicts, lookups) are the engine's
//! ([`crashpoint::http_api`]), the same a team's declared provider follows; this module
//! only says which.

use crashpoint::http_api::{parse_path, Answer, Api, ApiSpec, Idempotency, KeyFrom, Match, Route, RouteKind};
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

/// The payment gateway.
pub fn gateway() -> Api {
    let conflict = Answer::new(409, json!({"error": "idempotency key reused with different parameters"}));
    api(
        GATEWAY,
        "payment gateway: POST /charges with Idempotency-Key (kept 24 h; other parameters → 409)",
        "charges",
        "ch",
        Idempotency {
            key: KeyFrom::Header("idempotency-key".into()),
            window_ms: Some(KEY_RETENTION_MS),
            other_params: Some(conflict),
        },
    )
}

/// The accounting export.
pub fn accounting() -> Api {
    api(
        ACCOUNTING,
        "accounting export: PUT /invoices/{operation_id}, idempotent by id",
        "invoices",
        "inv",
        Idempotency { key: KeyFrom::Path("id".into()), window_ms: None, other_params: None },
    )
}

/// The mail provider.
pub fn mail() -> Api {
    api(
        MAIL,
        "mail provider: POST /messages, Idempotency-Key honoured inside a 10 min window only",
        "messages",
        "msg",
        Idempotency {
            key: KeyFrom::Header("idempotency-key".into()),
            window_ms: Some(MAIL_WINDOW_MS),
            other_params: None,
        },
    )
}

/// One collection `/<collection>`: applied by `POST /<collection>` (a header key) or
/// `PUT /<collection>/{id}` (the id is the key), answered `201 {"id": "<prefix>N"}` and on a
/// replay `200 {"id", "replayed": true}`; looked up by `GET /<collection>?operation_id=…` (the
/// body's `operation_id`) and `GET /<collection>/{key}`.
fn api(name: &'static str, about: &'static str, collection: &str, prefix: &str, idempotency: Idempotency) -> Api {
    let path = |p: &str| parse_path(p).expect("the orders providers' paths are well-formed");
    let apply_path = match idempotency.key {
        KeyFrom::Header(_) => format!("/{collection}"),
        KeyFrom::Path(_) => format!("/{collection}/{{id}}"),
    };
    let method = match idempotency.key {
        KeyFrom::Header(_) => "POST",
        KeyFrom::Path(_) => "PUT",
    };
    let found = Some(Answer::new(200, json!({"id": "{{effect.id}}", "operation_id": "{{effect.req.operation_id}}"})));
    let missing = Answer::new(404, json!({"error": "not found"}));
    Api::new(ApiSpec {
        name,
        about,
        url_env: format!("{}_URL", name.to_ascii_uppercase()),
        webhooks: Vec::new(),
        routes: vec![
            Route {
                label: "apply",
                method: method.into(),
                path: path(&apply_path),
                kind: RouteKind::Apply {
                    idempotency: Some(idempotency),
                    response: Answer::new(201, json!({"id": format!("{{{{new {prefix}}}}}")})),
                    replay: Some(Answer::new(200, json!({"id": "{{effect.id}}", "replayed": true}))),
                },
            },
            Route {
                label: "lookup",
                method: "GET".into(),
                path: path(&format!("/{collection}")),
                kind: RouteKind::Lookup {
                    by: Match::Query { param: "operation_id".into(), pattern: None, field: "operation_id".into() },
                    of: vec![],
                    found: found.clone(),
                    missing: missing.clone(),
                },
            },
            Route {
                label: "get",
                method: "GET".into(),
                path: path(&format!("/{collection}/{{id}}")),
                kind: RouteKind::Lookup {
                    by: Match::Path { param: "id".into(), key: true },
                    of: vec![],
                    found,
                    missing,
                },
            },
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crashpoint::{Provider, Reply, Request};

    fn charge(key: &str, amount: i64) -> Request {
        Request::new("POST", "/charges")
            .header("Idempotency-Key", key)
            .json(json!({"operation_id": "op", "amount": amount}))
    }

    #[test]
    fn the_gateway_replays_a_key_conflicts_on_other_parameters_and_forgets_after_24h() {
        let g = gateway();
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
        let m = mail();
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
        let a = accounting();
        let put = Request::new("PUT", "/invoices/op1").json(json!({"operation_id": "op1"}));
        assert_eq!(a.handle(&put, 0).reply.status, 201);
        assert_eq!(a.handle(&put, 99 * KEY_RETENTION_MS).reply.status, 200);
        assert_eq!(a.effects().len(), 1);
        assert_eq!(a.handle(&Request::new("GET", "/invoices/op1"), 0).reply.status, 200);
        assert_eq!(a.handle(&Request::new("GET", "/invoices/op2"), 0).reply.status, 404);
    }
}
