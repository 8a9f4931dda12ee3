//! The reconciliation job (the orders article: "check the remote reference or operation ID where the
//! API supports it … if the result cannot be established safely, stop automatic attempts
//! and escalate"): one `unknown` operation per cycle, looked up by its id at its provider.
//! Found: `succeeded`. Not found: `pending` again, retried under the same key. No answer (a
//! timeout or a 5xx) [`LOOKUPS_MAX`] times in a row: parked for a person, with the reason.

use async_trait::async_trait;
use crashpoint::{CallError, Cx, Poller, Val};

use crate::operations::{Operation, COLUMNS};
use crate::points;

/// Lookups in a row without an answer before an operation is parked (a 404 starts over).
pub const LOOKUPS_MAX: i64 = 3;

/// The reconciliation job. `enabled: false` is the mutant that only counts what is unknown.
pub struct Reconciler {
    /// Whether it resolves anything.
    pub enabled: bool,
}

#[async_trait(?Send)]
impl Poller for Reconciler {
    async fn run_once(&self, cx: &mut Cx) -> Result<(), CallError> {
        if !self.enabled {
            let n = cx
                .fetch_all("unknown", "SELECT operation_id FROM operations WHERE state = 'unknown'", &[])
                .await?
                .len();
            cx.idle(true);
            if n > 0 {
                cx.note(format!("{n} operation(s) in state unknown; no reconciliation"));
            }
            return Ok(());
        }
        let sql = format!(
            "SELECT {COLUMNS} FROM operations WHERE state = 'unknown' AND parked_reason IS NULL ORDER BY seq LIMIT 1"
        );
        let row = cx.fetch_optional("unknown", &sql, &[]).await?;
        cx.idle(row.is_none());
        let Some(row) = row else { return Ok(()) };
        let op = Operation::from_row(&row)?;
        let reply = cx.http("lookup", op.purpose.provider(), op.lookup()).await;
        cx.crash_point(points::AFTER_LOOKUP);
        let id = Val::Uuid(op.id);
        let (call, sql, vals) = match reply {
            Ok(r) if r.status == 200 => (
                "resolve",
                "UPDATE operations SET state = 'succeeded', provider_ref = $2 WHERE operation_id = $1 AND state = 'unknown'",
                vec![id, Val::Text(r.body["id"].as_str().unwrap_or_default().into())],
            ),
            Ok(r) if r.status == 404 => (
                "retry",
                "UPDATE operations SET state = 'pending', claimed_until = NULL, lookups = 0 WHERE operation_id = $1 AND state = 'unknown'",
                vec![id],
            ),
            other => {
                let why = match other {
                    Ok(r) => format!("lookup answered {}", r.status),
                    Err(CallError::NoResponse(why)) => why,
                    Err(e) => return Err(e),
                };
                (
                    "unanswered",
                    "UPDATE operations SET lookups = lookups + 1, parked_reason = CASE WHEN lookups + 1 >= $3 \
                     THEN 'outcome cannot be established: ' || $2 END WHERE operation_id = $1 AND state = 'unknown'",
                    vec![id, Val::Text(why), Val::I64(LOOKUPS_MAX)],
                )
            }
        };
        // In a transaction of its own: its COMMIT tells the processors that something changed.
        cx.begin().await?;
        cx.execute(call, sql, &vals).await?;
        cx.commit().await
    }
}
