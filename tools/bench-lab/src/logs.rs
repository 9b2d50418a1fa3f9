//! The poolers' complaints, condensed for the report: thousands of near-identical warning lines become a
//! few "N× message" lines, so that what pgmux logged under load is visible without drowning the figures.

use std::collections::HashMap;

/// Up to `max` distinct lines, most frequent first (ties in order of first sight), as `N× line`. Lines that
/// differ only in numbers (timestamps, ids, ports) count as one; the first one seen is shown, without its
/// timestamp and colours.
pub fn condense(lines: &[String], max: usize) -> Vec<String> {
    let mut seen: HashMap<String, (usize, usize, String)> = HashMap::new();
    for line in lines {
        let clean = strip_timestamp(&strip_ansi(line)).trim().to_owned();
        if clean.is_empty() {
            continue;
        }
        let order = seen.len();
        seen.entry(numbers_masked(&clean)).or_insert((order, 0, clean)).1 += 1;
    }
    let mut groups: Vec<(usize, usize, String)> = seen.into_values().collect();
    groups.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    groups.into_iter().take(max).map(|(_, count, line)| format!("{count}× {line}")).collect()
}

/// Remove terminal colour sequences (`ESC [ … letter`), which tracing writes even into a pipe.
pub fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Drop a leading timestamp (`2026-11-21T13:46:15.321Z` or PgBouncer's `2026-11-21 13:46:15.321 UTC`).
fn strip_timestamp(line: &str) -> &str {
    let line = line.trim_start();
    let is_date = line.len() >= 10
        && line.as_bytes()[..10].iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            _ => b.is_ascii_digit(),
        });
    if !is_date {
        return line;
    }
    let rest = line[10..].trim_start_matches(['T', ' ']);
    let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit() || c == ':' || c == '.' || c == 'Z');
    rest.trim_start().strip_prefix("UTC").unwrap_or(rest).trim_start()
}

fn numbers_masked(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for c in line.chars() {
        if c.is_ascii_digit() {
            if !out.ends_with('#') {
                out.push('#');
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_identical_lines_are_counted_once() {
        let lines: Vec<String> = [
            "\u{1b}[2m2026-11-21T13:46:15.321Z\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m pgmux: client 17 vanished",
            "2026-11-21T13:46:16.001Z  WARN pgmux: client 18 vanished",
            "2026-11-21 13:46:15.322 UTC [22431] WARNING C-0x55: pgmux/pgmux_app@127.0.0.1:40000 pooler error",
            "",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            condense(&lines, 5),
            vec![
                "2× WARN pgmux: client 17 vanished".to_owned(),
                "1× [22431] WARNING C-0x55: pgmux/pgmux_app@127.0.0.1:40000 pooler error".to_owned(),
            ]
        );
        assert_eq!(condense(&lines, 1).len(), 1);
        assert!(condense(&[], 5).is_empty());
    }
}
