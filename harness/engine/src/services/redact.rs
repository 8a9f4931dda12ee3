//! Redaction of passwords in connection strings, for every log line and report.

/// `url` with any password replaced by `***`. Strings that do not parse as URLs are returned
/// with any `password=...` key-value pair redacted.
///
/// `postgres://app:s3cret@db:5432/x` becomes `postgres://app:***@db:5432/x`.
pub fn url(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(_) => raw.to_string(),
        Err(_) => redact_kv(raw),
    }
}

fn redact_kv(raw: &str) -> String {
    raw.split_whitespace()
        .map(|part| match part.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => part.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hides_url_passwords() {
        assert_eq!(url("postgres://app:s3cret@db:5432/x"), "postgres://app:***@db:5432/x");
        assert_eq!(url("redis://:pw@127.0.0.1:6379/0"), "redis://:***@127.0.0.1:6379/0");
        assert_eq!(url("http://127.0.0.1:4566"), "http://127.0.0.1:4566");
        assert_eq!(url("host=db password=s3cret user=app"), "host=db password=*** user=app");
    }
}
