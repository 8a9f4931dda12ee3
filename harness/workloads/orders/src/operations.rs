//! A business operation of the orders article: its identity (purpose, order, parameters), the request
//! that carries it to its provider, and the lookup that reconciles it.

use crashpoint::CallError;
use crashpoint::Request;
use serde_json::json;
use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use crate::providers::{ACCOUNTING, GATEWAY, MAIL};

/// What an operation does, in the order the reference processes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Purpose {
    /// The confirmation email (mail provider).
    Email,
    /// The invoice export (accounting system).
    Export,
    /// The payment (gateway).
    Charge,
}

impl Purpose {
    /// Every purpose, in processing order.
    pub const ALL: [Purpose; 3] = [Purpose::Email, Purpose::Export, Purpose::Charge];

    /// Its name in `operations.purpose`, and the name of its call in traces.
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Email => "email",
            Purpose::Export => "export",
            Purpose::Charge => "charge",
        }
    }

    /// The provider that applies it.
    pub fn provider(self) -> &'static str {
        match self {
            Purpose::Email => MAIL,
            Purpose::Export => ACCOUNTING,
            Purpose::Charge => GATEWAY,
        }
    }

    /// The purpose named `s`. Errors: another name.
    pub fn parse(s: &str) -> Result<Purpose, CallError> {
        Purpose::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| CallError::Unrecoverable(format!("unknown purpose `{s}`")))
    }
}

/// The operation id of `purpose` for `order`: `v5(order_id, purpose)`, fixed when the
/// operation is created and reused by every retry, redelivery and replay (the orders article: "persist
/// that identity when creating the operation").
pub fn operation_id(order_id: Uuid, purpose: Purpose) -> Uuid {
    Uuid::new_v5(&order_id, purpose.as_str().as_bytes())
}

/// An operation as a worker read it from `operations`.
#[derive(Debug, Clone)]
pub struct Operation {
    /// Its id: the provider's idempotency key in the reference.
    pub id: Uuid,
    /// What it does.
    pub purpose: Purpose,
    /// The order it belongs to.
    pub order_id: Uuid,
    /// The amount (the charge's, the invoice's), cents.
    pub amount: i64,
    /// Attempts so far, this one included.
    pub attempts: i32,
}

/// The columns [`Operation::from_row`] reads, for `RETURNING`/`SELECT` lists.
pub const COLUMNS: &str = "operation_id, purpose, order_id, (params->>'amount')::bigint AS amount, attempts";

impl Operation {
    /// Reads [`COLUMNS`]. Errors: a row of another shape.
    pub fn from_row(row: &PgRow) -> Result<Operation, CallError> {
        let get = |e: sqlx::Error| CallError::Unrecoverable(format!("operations row: {e}"));
        Ok(Operation {
            id: row.try_get("operation_id").map_err(get)?,
            purpose: Purpose::parse(row.try_get::<String, _>("purpose").map_err(get)?.as_str())?,
            order_id: row.try_get("order_id").map_err(get)?,
            amount: row.try_get("amount").map_err(get)?,
            attempts: row.try_get("attempts").map_err(get)?,
        })
    }

    /// The body every request of this operation carries: the operation id (the provider's
    /// metadata that lookups search), the order and the parameters.
    pub fn body(&self) -> serde_json::Value {
        match self.purpose {
            Purpose::Email => {
                json!({"operation_id": self.id, "order_id": self.order_id, "template": "order-confirmation"})
            }
            Purpose::Export | Purpose::Charge => {
                json!({"operation_id": self.id, "order_id": self.order_id, "amount": self.amount})
            }
        }
    }

    /// The request that applies it under idempotency key `key`, with `body`. `None` sends no
    /// `Idempotency-Key` header (the email, charge); the export's PUT path always carries a key
    /// (`key`, else the operation id), which is accounting's key.
    pub fn request(&self, key: Option<String>, body: serde_json::Value) -> Request {
        let req = match self.purpose {
            Purpose::Charge => Request::new("POST", "/charges"),
            Purpose::Email => Request::new("POST", "/messages"),
            Purpose::Export => {
                Request::new("PUT", &format!("/invoices/{}", key.clone().unwrap_or_else(|| self.id.to_string())))
            }
        };
        let req = match key {
            Some(k) if self.purpose != Purpose::Export => req.header("Idempotency-Key", k),
            _ => req,
        };
        req.json(body)
    }

    /// The lookup of its outcome by operation id.
    pub fn lookup(&self) -> Request {
        match self.purpose {
            Purpose::Charge => Request::new("GET", "/charges").query("operation_id", self.id.to_string()),
            Purpose::Email => Request::new("GET", "/messages").query("operation_id", self.id.to_string()),
            Purpose::Export => Request::new("GET", &format!("/invoices/{}", self.id)),
        }
    }
}
