use async_trait::async_trait;

use crate::system::{CallError, Cx, Retention};
use crashpoint::Val;

/// Deletes `processed_message` rows older than `retention_s`, where "older" is decided by the
/// logical clock (`processed_at` is written from it), not by PostgreSQL's `now()`.
pub struct DedupRetention;

#[async_trait(?Send)]
impl Retention for DedupRetention {
    async fn run_once(&self, cx: &mut Cx) -> Result<(), CallError> {
        let window = cx.config::<crate::SystemConfig>().retention_s;
        let n = cx
            .execute("purge", "DELETE FROM processed_message WHERE processed_at < $1", &[Val::NowMinusS(window)])
            .await?;
        cx.note(format!(
            "retention purged {n} dedup rows older than {}s",
            cx.config::<crate::SystemConfig>().retention_s
        ));
        // A run that purged nothing found nothing to do (the trace folds it in the drain).
        cx.idle(n == 0);
        Ok(())
    }
}
