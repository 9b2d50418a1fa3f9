//! Command-line values the demo and the benchmark driver share.

use std::time::Duration;

/// `30s`, `500ms`, `0.5s`, `2m`, or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("not a duration: {text:?} (try 30s, 500ms, 2m)"))?;
    let seconds = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1e3,
        "m" | "min" => value * 60.0,
        other => {
            return Err(format!("unknown unit {other:?} in {text:?} (use ms, s or m)"));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("0.5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("s").is_err());
    }
}
