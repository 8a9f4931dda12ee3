//! Logical time: its epoch, and durations in schedules and traces (`31s`, `1500ms`, `2m`, `1h`,
//! `3d`, in logical ms).

use chrono::{DateTime, Utc};

/// The logical clock's epoch: logical time 0 is 2026-01-01T00:00:00Z.
pub fn epoch() -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_225_600, 0).expect("valid epoch")
}

/// The logical clock's limit, ms: 100 years (`36500d`). A duration past it, or scripted ticks
/// adding up past it ([`crate::schedule::parse`]), are refused, so that logical time plus any
/// deadline (a visibility timeout, a lock's TTL, a lease) stays far below `u64::MAX`.
pub const LOGICAL_TIME_MAX_MS: u64 = 36_500 * 86_400_000;

/// Parses `31s`, `1500ms`, `2m`, `1h`, `3d` into ms. Errors: no leading number, a unit other
/// than ms, s, m, h or d, or a duration past [`LOGICAL_TIME_MAX_MS`] (`36500d`).
pub fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return Err(format!("`{s}` is not a duration like 31s or 1500ms"));
    }
    let mult = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("`{s}`: unit must be ms, s, m, h or d")),
    };
    // All digits: parsing fails only when the number is past u64::MAX.
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|ms| *ms <= LOGICAL_TIME_MAX_MS)
        .ok_or_else(|| format!("`{s}` is longer than {}, the logical clock's limit", format_duration_ms(LOGICAL_TIME_MAX_MS)))
}

/// Formats ms in the largest unit that divides it: `31s`, `1500ms`, `2m`.
pub fn format_duration_ms(ms: u64) -> String {
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)] {
        if ms >= size && ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// A logical instant as the trace prints it: seconds with 3 decimals, `31.000s`.
pub fn format_instant_ms(ms: u64) -> String {
    format!("{}.{:03}s", ms / 1000, ms % 1000)
}
