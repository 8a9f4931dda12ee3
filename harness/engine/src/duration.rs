//! Durations in schedules and traces: `31s`, `1500ms`, `2m`, `1h`, `3d`, in logical ms.

/// Parses `31s`, `1500ms`, `2m`, `1h`, `3d` into ms. Errors: no leading number, a unit other
/// than ms, s, m, h or d, or a duration past `u64::MAX` ms.
pub fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("`{s}` is not a duration like 31s or 1500ms"))?;
    let mult = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("`{s}`: unit must be ms, s, m, h or d")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("`{s}` is too long"))
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
