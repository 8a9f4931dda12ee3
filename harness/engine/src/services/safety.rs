//! The loopback guard for destructive operations.

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
    for raw in [&endpoints.database_url, &endpoints.sqs_endpoint_url, &endpoints.redis_url] {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn eps(db: &str) -> Endpoints {
        Endpoints {
            database_url: db.into(),
            sqs_endpoint_url: "http://127.0.0.1:4566".into(),
            redis_url: "redis://localhost:6379".into(),
        }
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
