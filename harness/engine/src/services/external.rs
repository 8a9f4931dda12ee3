//! The external provider: services named by environment variables.

use anyhow::{bail, Result};

use super::Endpoints;

/// The three variables that select the external provider.
pub const ENV_VARS: [&str; 3] = ["DATABASE_URL", "SQS_ENDPOINT_URL", "REDIS_URL"];

/// The endpoints from `DATABASE_URL`, `SQS_ENDPOINT_URL` and `REDIS_URL`, when all three are
/// set and non-empty; `None` otherwise.
pub fn from_env() -> Option<Endpoints> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    Some(Endpoints {
        database_url: get("DATABASE_URL")?,
        sqs_endpoint_url: get("SQS_ENDPOINT_URL")?,
        redis_url: get("REDIS_URL")?,
    })
}

/// Like [`from_env`], but an error naming the missing variables when `--services external`
/// was forced without them.
pub fn require_env() -> Result<Endpoints> {
    if let Some(e) = from_env() {
        return Ok(e);
    }
    let missing: Vec<&str> = ENV_VARS
        .iter()
        .copied()
        .filter(|k| std::env::var(k).map(|v| v.trim().is_empty()).unwrap_or(true))
        .collect();
    bail!(
        "--services external needs {} set (run `crashpoint up` to start services and print them)",
        missing.join(", ")
    )
}
