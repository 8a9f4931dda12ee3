//! The loopback guard for destructive operations.
//!
//! Every operation of the harness that creates or destroys something on the services, or
//! deletes what a system put there, is listed in [`DESTRUCTIVE`]; a test finds each one in the
//! source and fails on one that is not listed. All of them are reached only through endpoints
//! that passed [`check_destructive`]: `cli::run::with_services` checks before `run`, `repro`,
//! `catalogue` and `bench` do anything, `doctor --calibrate` before it connects, and the
//! library entry points (`testkit`, `explore`) run on endpoints the harness itself started or
//! a team named for its tests. A CLI test runs each command against a remote host.

use std::net::IpAddr;

use anyhow::{bail, Result};

use super::{redact, Endpoints};

/// Whether `host` (a name or an address) is on the loopback interface.
pub fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    if h.eq_ignore_ascii_case("localhost") || h.is_empty() {
        return true;
    }
    h.parse::<IpAddr>().map(|ip| ip.is_loopback()).unwrap_or(false)
}

fn host_of(raw: &str) -> Option<String> {
    url::Url::parse(raw).ok().and_then(|u| u.host_str().map(str::to_string))
}

/// Refuses `what` (e.g. "creating and dropping schemas and queues") when any endpoint is not on loopback,
/// unless `allow_remote`. A URL with a Unix-socket host (no host part) counts as local.
pub fn check_destructive(endpoints: &Endpoints, allow_remote: bool, what: &str) -> Result<()> {
    if allow_remote {
        return Ok(());
    }
    for (_, raw) in endpoints.urls() {
        let host = host_of(raw).unwrap_or_default();
        if !is_loopback_host(&host) {
            bail!(
                "refusing {what} on non-loopback host {host} ({}); pass --allow-remote if this \
                 is a throwaway test service",
                redact::url(raw)
            );
        }
    }
    Ok(())
}

/// The destructive operations in the engine's source: (file under `src/`, the operation as
/// written there, what it destroys). Statements a workload's handlers run are not here: they
/// run through [`crate::sim::cx::Cx`] in the schedule's own schema, queues and keys.
#[cfg(any(test, feature = "internals"))]
pub const DESTRUCTIVE: &[(&str, &str, &str)] = &[
    ("namespace/admin.rs", "CREATE SCHEMA", "a schedule's schema, named from the process and a counter (`pool::unique_namespace`)"),
    ("namespace/admin.rs", "DROP SCHEMA", "the schedule's schema and its side schema `<ns>_seed` at teardown"),
    ("namespace/snapshot.rs", "CREATE SCHEMA", "the side schema `<ns>_seed` that keeps the rows the DDL inserted"),
    ("namespace/snapshot.rs", "TRUNCATE", "the pooled schema's tables, to reset it for the next schedule"),
    ("namespace/admin.rs", ".create_queue()", "the schedule's queues, named from its namespace"),
    ("namespace/admin.rs", ".delete_queue()", "the schedule's queues at teardown"),
    ("namespace/admin.rs", ".delete_message()", "a message past its queue's retention, on the schedule's queue"),
    ("namespace/admin.rs", ".delete_message_batch()", "what a schedule published to an outbound queue, before the namespace's next schedule"),
    ("namespace/admin.rs", "cmd(\"DEL\")", "the schedule's Redis keys (lock expiry, reset, teardown)"),
    ("sim/cx/sqs.rs", ".delete_message()", "a worker's DeleteMessage of its delivery"),
    ("sim/cx/sqs.rs", ".delete_message_batch()", "a worker's DeleteMessageBatch of the deliveries of one receive"),
    ("sim/wire/sqs/batch.rs", ".delete_message_batch()", "an external worker's DeleteMessageBatch, made for it on the schedule's queue with the receipt handles it received"),
    ("sim/cx/mod.rs", "redis::cmd(&", "a worker's Redis command (`Cx::redis_call`): a lock's `SET … NX`, its compare-and-delete release (`Cx::unlock`) or a plain `DEL` of whoever holds the key (`Cx::unlock_unchecked`)"),
    ("services/calibrate/probes.rs", ".create_queue()", "the calibration's probe queues"),
    ("services/calibrate/probes.rs", ".delete_queue()", "the calibration's probe queues"),
    ("services/calibrate/probes.rs", ".delete_message()", "probe messages"),
];

/// What counts as destructive when the source is searched (see [`DESTRUCTIVE`]).
#[cfg(any(test, feature = "internals"))]
pub const DESTRUCTIVE_PATTERNS: &[&str] = &[
    "CREATE SCHEMA", "DROP SCHEMA", "DROP TABLE", "DROP DATABASE", "TRUNCATE", "DELETE FROM",
    ".create_queue()", ".delete_queue()", ".purge_queue()", ".delete_message()", ".delete_message_batch()",
    "cmd(\"DEL\")", "cmd(\"UNLINK\")", "cmd(\"EVAL\")", "cmd(\"EVALSHA\")", "redis::cmd(&", "Script::new(", "FLUSHALL", "FLUSHDB",
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every destructive operation in the source is in [`DESTRUCTIVE`], and every
    /// entry of the list is still there; comments and tests are not operations.
    #[test]
    fn every_destructive_operation_in_the_source_is_listed() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = std::collections::BTreeSet::new();
        let mut stack = vec![src.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let rel = path.strip_prefix(&src).unwrap().to_string_lossy().to_string();
                if path.extension().is_none_or(|e| e != "rs") || rel == "services/safety.rs" {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                // Code only: up to the unit tests, without comments and log or error texts.
                let code = text.split("#[cfg(test)]").next().unwrap();
                for line in code.lines().map(str::trim).filter(|l| !l.starts_with("//")) {
                    let code_part = line.split("tracing::").next().unwrap().split("context(").next().unwrap();
                    for p in DESTRUCTIVE_PATTERNS {
                        if code_part.contains(p) {
                            found.insert((rel.clone(), p.to_string()));
                        }
                    }
                }
            }
        }
        let listed: std::collections::BTreeSet<(String, String)> =
            DESTRUCTIVE.iter().map(|(f, op, _)| (f.to_string(), op.to_string())).collect();
        let unlisted: Vec<_> = found.difference(&listed).collect();
        let stale: Vec<_> = listed.difference(&found).collect();
        assert!(unlisted.is_empty(), "destructive operations not in safety::DESTRUCTIVE: {unlisted:?}");
        assert!(stale.is_empty(), "listed in safety::DESTRUCTIVE but not found in the source: {stale:?}");
    }

    fn eps(db: &str) -> Endpoints {
        Endpoints {
            database_url: db.into(),
            sqs_endpoint_url: "http://127.0.0.1:4566".into(),
            sqs_shards: vec!["http://localhost:4567".into()],
            redis_url: "redis://localhost:6379".into(),
        }
    }

    /// Every SQS endpoint counts, the shards too.
    #[test]
    fn refuses_a_remote_sqs_shard() {
        let mut e = eps("postgres://u@127.0.0.1/x");
        e.sqs_shards.push("http://sqs.prod:4566".into());
        let err = check_destructive(&e, false, "DeleteQueue").unwrap_err().to_string();
        assert!(err.contains("sqs.prod"), "{err}");
    }

    #[test]
    fn refuses_remote_unless_allowed() {
        assert!(check_destructive(&eps("postgres://u@127.0.0.1/x"), false, "t").is_ok());
        assert!(check_destructive(&eps("postgres://u@[::1]/x"), false, "t").is_ok());
        let err = check_destructive(&eps("postgres://u:pw@db.prod/x"), false, "TRUNCATE")
            .unwrap_err()
            .to_string();
        assert!(err.contains("db.prod") && err.contains("--allow-remote"), "{err}");
        assert!(!err.contains("pw@"), "password leaked: {err}");
        assert!(check_destructive(&eps("postgres://u@db.prod/x"), true, "t").is_ok());
    }
}
