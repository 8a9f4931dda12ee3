//! `manual-replay`: an operator replays the operations whose outcome is unknown or that were
//! parked, under their original operation ids (the orders article: "manual replay is another handler
//! execution … keep the existing business operation ID").

use crashpoint::{Resend, WorkloadFault};

/// The operator's replay, a fault of the orders workload's own.
pub struct ManualReplay;

#[async_trait::async_trait(?Send)]
impl WorkloadFault for ManualReplay {
    fn name(&self) -> &'static str {
        "manual-replay"
    }

    fn about(&self) -> &'static str {
        "an operator sets every unknown or parked operation pending again, under its original operation id"
    }

    async fn apply(&self, pg: &sqlx::PgPool) -> anyhow::Result<Vec<Resend>> {
        sqlx::query(
            "UPDATE operations SET state = 'pending', parked_reason = NULL, lookups = 0, claimed_until = NULL \
             WHERE state = 'unknown' OR (state = 'failed' AND parked_reason IS NOT NULL)",
        )
        .execute(pg)
        .await?;
        Ok(Vec::new())
    }

    fn announce_nothing(&self) -> String {
        "manual-replay: unknown and parked operations are pending again, under their original ids".into()
    }
}
