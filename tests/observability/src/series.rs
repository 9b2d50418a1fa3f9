//! Reading Prometheus text (0.0.4) for the assertions: sample values, and the set of series shapes (name and
//! label names) an exporter produces, which is what a pooler must match for dashboards to keep working.

use std::collections::BTreeSet;

/// One sample line: metric name, labels in order, value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// Every sample of a text exposition (comments skipped). Label values are unescaped. Lines it cannot read
/// are returned as errors, so a test sees them.
pub fn samples(text: &str) -> Result<Vec<Sample>, String> {
    text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).map(sample).collect()
}

fn sample(line: &str) -> Result<Sample, String> {
    let bad = || format!("unreadable sample line: {line:?}");
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => line.split_at(i),
        None => return Err(bad()),
    };
    let mut labels = Vec::new();
    let rest = if let Some(mut body) = rest.strip_prefix('{') {
        loop {
            body = body.trim_start_matches(',');
            if let Some(after) = body.strip_prefix('}') {
                break after;
            }
            let (key, after) = body.split_once("=\"").ok_or_else(bad)?;
            let (value, after) = unescape_until_quote(after).ok_or_else(bad)?;
            labels.push((key.to_owned(), value));
            body = after;
        }
    } else {
        rest
    };
    let value = rest.split_whitespace().next().ok_or_else(bad)?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().map_err(|_| bad())?,
    };
    Ok(Sample { name: name.to_owned(), labels, value })
}

/// The label value up to its closing quote, unescaped, and what follows the quote.
fn unescape_until_quote(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &s[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// `name{label,label}` for every distinct (name, label names) in `samples`, label names sorted.
pub fn shapes<'a>(samples: impl IntoIterator<Item = &'a Sample>) -> BTreeSet<String> {
    samples
        .into_iter()
        .map(|s| {
            let mut names: Vec<&str> = s.labels.iter().map(|(k, _)| k.as_str()).collect();
            names.sort_unstable();
            format!("{}{{{}}}", s.name, names.join(","))
        })
        .collect()
}

/// The value of the sample with this name and these label values (others ignored), if there is one.
pub fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples.iter().find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v))).map(|s| s.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_labels_with_escapes_and_special_values() {
        let text = "# HELP x y\nfoo{a=\"1\",b=\"q\\\"\\\\\\n\"} 2.5\nbar 1e3\nbaz{le=\"+Inf\"} +Inf\n";
        let s = samples(text).unwrap();
        assert_eq!(s[0].labels, vec![("a".into(), "1".into()), ("b".into(), "q\"\\\n".into())]);
        assert_eq!((s[0].value, s[1].value, s[2].value), (2.5, 1000.0, f64::INFINITY));
        assert_eq!(shapes(&s).into_iter().collect::<Vec<_>>(), vec!["bar{}", "baz{le}", "foo{a,b}"]);
        assert_eq!(value(&s, "foo", &[("a", "1")]), Some(2.5));
        assert!(samples("foo{a=\"1\" 2").is_err());
    }
}
