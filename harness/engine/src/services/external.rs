//! The external provider: services named by environment variables.

use anyhow::{bail, Result};

use super::Endpoints;

/// The three variables that select the external provider.
pub const ENV_VARS: [&str; 3] = ["DATABASE_URL", "SQS_ENDPOINT_URL", "REDIS_URL"];

/// The optional variable naming further SQS endpoints ([`Endpoints::sqs_shards`]): URLs
/// separated by commas, as `crashpoint up` prints it when it started several LocalStacks.
pub const SQS_SHARDS_VAR: &str = "CRASHPOINT_SQS_SHARDS";

/// The endpoints from `DATABASE_URL`, `SQS_ENDPOINT_URL` and `REDIS_URL`, when all three are
/// set and non-empty, with the further SQS endpoints of [`SQS_SHARDS_VAR`] if it is set;
/// `None` otherwise.
pub fn from_env() -> Option<Endpoints> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    Some(Endpoints {
        database_url: get("DATABASE_URL")?,
        sqs_endpoint_url: get("SQS_ENDPOINT_URL")?,
        sqs_shards: get(SQS_SHARDS_VAR).map(|v| shards(&v)).unwrap_or_default(),
        redis_url: get("REDIS_URL")?,
    })
}

/// The URLs of a [`SQS_SHARDS_VAR`] value: split at commas, trimmed, empty entries skipped
/// (`"http://a:1, http://b:2,"` is two URLs). A URL that does not parse fails where it is
/// first used, with its text in the error.
pub fn shards(value: &str) -> Vec<String> {
    value.split(',').map(str::trim).filter(|u| !u.is_empty()).map(str::to_string).collect()
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

#[cfg(test)]
mod tests {
    #[test]
    fn shards_are_split_at_commas_trimmed_and_empty_entries_skipped() {
        assert_eq!(super::shards("http://127.0.0.1:1, http://127.0.0.1:2,"), ["http://127.0.0.1:1", "http://127.0.0.1:2"]);
        assert!(super::shards(" , ").is_empty());
    }
}
