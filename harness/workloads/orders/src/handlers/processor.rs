//! The operation processor (a polling worker): claims one due operation atomically, looks it
//! up by id when an earlier attempt may have been applied, calls its provider under the
//! operation id, and records the outcome. A timeout, a lost response or
//! a 5xx makes the outcome `unknown` for reconciliation; a 4xx rejection is parked for a
//! person, with the reason (the orders article: "retries should be bounded and matched to the error").

use async_trait::async_trait;
use crashpoint::{CallError, Cx, Poller, Val};
use uuid::Uuid;

use super::{ClaimRule, Flaws, KeyRule, OnUnknown};
use crate::operations::{Operation, COLUMNS};
use crate::points;

/// How long a claim holds an operation, s.
pub const LEASE_S: u64 = 60;

/// The claim of `rule` (`$1` now): one due operation, oldest first, `attempts` counted.
fn claim_sql(rule: ClaimRule) -> String {
    let (set, due) = match rule {
        ClaimRule::Lease => (
            format!("claimed_until = $1::timestamptz + interval '{LEASE_S} seconds'"),
            "state = 'pending' AND (claimed_until IS NULL OR claimed_until <= $1)",
        ),
        ClaimRule::InProgressForever => ("state = 'in_progress'".to_string(), "state = 'pending'"),
        ClaimRule::InProgressExpiring => (
            format!("state = 'in_progress', claimed_until = $1::timestamptz + interval '{LEASE_S} seconds'"),
            "state = 'pending' OR (state = 'in_progress' AND claimed_until <= $1)",
        ),
    };
    format!(
        "UPDATE operations SET attempts = attempts + 1, {set} WHERE operation_id = \
         (SELECT operation_id FROM operations WHERE {due} ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED) \
         RETURNING {COLUMNS}"
    )
}

/// Records the outcome of attempt `$5` of operation `$1` (fenced: a later claim wins).
const RECORD: &str =
    "UPDATE operations SET state = $2, provider_ref = NULLIF($3, ''), parked_reason = NULLIF($4, ''), \
     claimed_until = NULL WHERE operation_id = $1 AND attempts = $5 AND state IN ('pending', 'in_progress')";

/// What a call established.
enum Outcome {
    /// Applied: the provider's reference.
    Applied(String),
    /// Rejected (4xx): why.
    Rejected(String),
    /// Not known (no response, 5xx): why.
    Unknown(String),
}

/// The operation processor.
pub struct Processor {
    /// Its rules.
    pub flaws: Flaws,
}

impl Processor {
    /// The key and body of attempt `op.attempts` under the system's key rule.
    fn keyed(&self, op: &Operation) -> (String, serde_json::Value) {
        let mut body = op.body();
        let key = match self.flaws.key {
            KeyRule::Operation => op.id.to_string(),
            KeyRule::PerAttempt => Uuid::new_v5(&op.id, format!("attempt-{}", op.attempts).as_bytes()).to_string(),
            KeyRule::RequestHash => {
                body["attempt"] = op.attempts.into();
                Uuid::new_v5(&Uuid::NAMESPACE_OID, body.to_string().as_bytes()).to_string()
            }
        };
        (key, body)
    }

    /// Records the outcome in its own transaction (its COMMIT tells the other pollers that
    /// something changed), leaving it open when `keep_open`.
    async fn record_in(
        &self,
        cx: &mut Cx,
        op: &Operation,
        state: &str,
        reference: &str,
        reason: &str,
        keep_open: bool,
    ) -> Result<(), CallError> {
        let vals = [
            Val::Uuid(op.id),
            Val::Text(state.into()),
            Val::Text(reference.into()),
            Val::Text(reason.into()),
            Val::I64(op.attempts.into()),
        ];
        cx.begin().await?;
        let n = cx.execute("record", RECORD, &vals).await?;
        if n == 0 {
            cx.note(format!("{}: another claim took over; outcome not recorded", op.id));
        }
        if keep_open {
            return Ok(());
        }
        cx.commit().await
    }

    async fn record(
        &self,
        cx: &mut Cx,
        op: &Operation,
        state: &str,
        reference: &str,
        reason: &str,
    ) -> Result<(), CallError> {
        self.record_in(cx, op, state, reference, reason, false).await
    }
}

#[async_trait(?Send)]
impl Poller for Processor {
    async fn run_once(&self, cx: &mut Cx) -> Result<(), CallError> {
        let row = cx.fetch_optional("lease", &claim_sql(self.flaws.claim), &[Val::Now]).await?;
        cx.idle(row.is_none());
        let Some(row) = row else { return Ok(()) };
        let op = Operation::from_row(&row)?;
        cx.crash_point(points::AFTER_LEASE);
        if op.attempts > 1 && self.flaws.look_before_retry {
            // An earlier attempt may have been applied: ask before calling again.
            match cx.http("lookup", op.purpose.provider(), op.lookup()).await {
                Ok(r) if r.status == 200 => {
                    return self.record(cx, &op, "succeeded", r.body["id"].as_str().unwrap_or_default(), "").await;
                }
                Ok(r) if r.status == 404 => {}
                Ok(_) | Err(CallError::NoResponse(_)) => return self.record(cx, &op, "unknown", "", "").await,
                Err(e) => return Err(e),
            }
        }
        let (key, body) = self.keyed(&op);
        let reply = cx.http(op.purpose.as_str(), op.purpose.provider(), op.request(Some(key), body)).await;
        cx.crash_point(points::AFTER_CALL);
        let outcome = match reply {
            Ok(r) if r.status < 300 => Outcome::Applied(r.body["id"].as_str().unwrap_or_default().to_string()),
            Ok(r) if r.status >= 500 => Outcome::Unknown(format!("{} answered {}", op.purpose.provider(), r.status)),
            Ok(r) => Outcome::Rejected(format!(
                "rejected by {}: {} {}",
                op.purpose.provider(),
                r.status,
                r.body["error"].as_str().unwrap_or("")
            )),
            Err(CallError::NoResponse(why)) => Outcome::Unknown(why),
            Err(e) => return Err(e),
        };
        match outcome {
            Outcome::Applied(reference) => self.record(cx, &op, "succeeded", &reference, "").await,
            Outcome::Rejected(why) => self.record(cx, &op, "failed", "", &why).await,
            Outcome::Unknown(why) => match (self.flaws.claim, self.flaws.on_unknown) {
                (ClaimRule::Lease, OnUnknown::Reconcile) => self.record(cx, &op, "unknown", "", "").await,
                (_, OnUnknown::NewOperation) => {
                    self.record_in(cx, &op, "failed", "", "", true).await?;
                    let new = Uuid::new_v5(&op.id, format!("retry-{}", op.attempts).as_bytes());
                    cx.execute(
                        "new_operation",
                        "INSERT INTO operations (operation_id, purpose, order_id, params) \
                         SELECT $2, purpose, order_id, params FROM operations WHERE operation_id = $1",
                        &[Val::Uuid(op.id), Val::Uuid(new)],
                    )
                    .await?;
                    cx.commit().await
                }
                _ => {
                    cx.note(format!("{}: {why}; left in progress", op.id));
                    Ok(())
                }
            },
        }
    }
}
