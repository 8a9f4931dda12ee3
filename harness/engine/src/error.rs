//! Exit codes and the error kinds that choose them.
//!
//! `crashpoint` exits with [`EXIT_OK`] when everything passed, [`EXIT_VIOLATION`] when an
//! invariant was violated, and [`EXIT_HARNESS`] for a harness or services error (a missing
//! binary, a service that did not become ready, a malformed scenario file).

/// All scenarios passed, or the command succeeded.
pub const EXIT_OK: i32 = 0;
/// At least one invariant was violated.
pub const EXIT_VIOLATION: i32 = 1;
/// The harness or a service failed; no verdict on the system under test.
pub const EXIT_HARNESS: i32 = 2;

/// A required executable is not installed.
///
/// The message names the binary and the Debian package that provides it, so that the
/// fix is one `apt-get install` away.
#[derive(Debug, thiserror::Error)]
#[error("`{binary}` was not found ({searched}); install it with `apt-get install {package}`")]
pub struct MissingBinary {
    /// The executable that was looked for, e.g. `redis-server`.
    pub binary: String,
    /// The Debian package that provides it, e.g. `redis-server`.
    pub package: String,
    /// Where it was looked for, for the message.
    pub searched: String,
}

/// The text of a panic's payload (`panic!("…")` gives a `&str` or a `String`), for the
/// harness error that a panic in a workload's code becomes; "a panic" for any other payload.
pub fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "a panic".into())
}
