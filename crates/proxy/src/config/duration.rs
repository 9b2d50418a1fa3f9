//! Durations as configuration writes them, with nothing else of the configuration: read by the settings
//! ([`super::value`]) and by route entries ([`super::routes`]) alike.

use std::time::Duration;

/// `500ms`, `5s`, `2m`, `1h`, or a bare number of seconds (PgBouncer's unit).
pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let ms = match unit.trim() {
        "ms" => n,
        "" | "s" => n.checked_mul(1000)?,
        "m" | "min" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(ms))
}
