//! CloudWatch Embedded Metric Format: metrics as single-line JSON documents on stdout, which Lambda ships
//! to CloudWatch Logs and CloudWatch turns into metrics with no API call and no agent.
//!
//! One document per line: `_aws.Timestamp` (ms), one metric directive (`Namespace`, `Dimensions` as one
//! dimension set of every dimension key, `Metrics` with `Name` and `Unit`), the dimension values and the
//! metric values at the root. Latencies go as arrays of values so that CloudWatch computes real
//! percentiles. The specification's limits are kept by splitting into several documents: at most
//! [`MAX_METRICS_PER_DOCUMENT`] metrics per directive, [`MAX_VALUES_PER_METRIC`] values per array, and at
//! most [`MAX_VALUES_PER_DOCUMENT`] values in a document, which keeps it far below the 256 KB event limit.

use std::fmt::Write as _;

/// The specification's limit of metric definitions in one directive.
pub const MAX_METRICS_PER_DOCUMENT: usize = 100;
/// The specification's limit of values in one metric's array.
pub const MAX_VALUES_PER_METRIC: usize = 100;
/// pgmux's own limit, so that a document stays under ~100 KB (values are written as at most ~20 bytes).
pub const MAX_VALUES_PER_DOCUMENT: usize = 5_000;
/// Dimension keys in one dimension set: 30 today, 9 in older text of the specification; we keep to 9.
pub const MAX_DIMENSIONS: usize = 9;

/// CloudWatch's units that pgmux uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmfUnit {
    Count,
    Microseconds,
    Seconds,
    Bytes,
    None,
}

impl EmfUnit {
    pub fn as_str(self) -> &'static str {
        match self {
            EmfUnit::Count => "Count",
            EmfUnit::Microseconds => "Microseconds",
            EmfUnit::Seconds => "Seconds",
            EmfUnit::Bytes => "Bytes",
            EmfUnit::None => "None",
        }
    }
}

/// One value, or raw samples of which CloudWatch computes statistics and percentiles.
#[derive(Clone, Debug, PartialEq)]
pub enum EmfValue {
    Single(f64),
    Values(Vec<f64>),
}

/// A metric for one flush.
#[derive(Clone, Debug, PartialEq)]
pub struct EmfMetric {
    pub name: &'static str,
    pub unit: EmfUnit,
    pub value: EmfValue,
}

/// Where the metrics go: namespace, dimensions (key and value) and the time they are for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmfTarget {
    pub namespace: String,
    pub dimensions: Vec<(String, String)>,
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
}

/// Why no documents could be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmfError {
    /// The namespace is empty, longer than 255 characters, or has characters outside `[A-Za-z0-9._#:/-]`,
    /// or starts with `AWS/` (reserved for AWS services).
    BadNamespace(String),
    /// More than [`MAX_DIMENSIONS`] dimensions, an empty key or value, or a key that is also a metric name.
    BadDimensions(String),
}

impl std::fmt::Display for EmfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EmfError::BadNamespace(why) => write!(f, "bad CloudWatch namespace: {why}"),
            EmfError::BadDimensions(why) => write!(f, "bad CloudWatch dimensions: {why}"),
        }
    }
}

impl std::error::Error for EmfError {}

/// The EMF lines (each one JSON document, without the newline) for `metrics`. Non-finite values are
/// dropped (EMF needs finite numbers), and so are metrics left with no value; no metric, no line.
pub fn emf_lines(target: &EmfTarget, metrics: &[EmfMetric]) -> Result<Vec<String>, EmfError> {
    check_target(target, metrics)?;
    // Each metric cut into pieces of at most MAX_VALUES_PER_METRIC values.
    let mut pieces: Vec<(usize, Piece)> = Vec::new();
    for (i, m) in metrics.iter().enumerate() {
        match &m.value {
            EmfValue::Single(v) if v.is_finite() => pieces.push((i, Piece::Single(*v))),
            EmfValue::Single(_) => {}
            EmfValue::Values(values) => {
                let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
                for chunk in finite.chunks(MAX_VALUES_PER_METRIC) {
                    pieces.push((i, Piece::Values(chunk.to_vec())));
                }
            }
        }
    }
    // First fit: a piece goes into the first document that has room and does not hold its metric yet.
    let mut docs: Vec<Vec<(usize, Piece)>> = Vec::new();
    for (i, piece) in pieces {
        let fits = |doc: &Vec<(usize, Piece)>| {
            doc.len() < MAX_METRICS_PER_DOCUMENT
                && !doc.iter().any(|(j, _)| *j == i)
                && doc.iter().map(|(_, p)| p.len()).sum::<usize>() + piece.len() <= MAX_VALUES_PER_DOCUMENT
        };
        match docs.iter_mut().find(|d| fits(d)) {
            Some(doc) => doc.push((i, piece)),
            None => docs.push(vec![(i, piece)]),
        }
    }
    Ok(docs.iter().map(|doc| document(target, metrics, doc)).collect())
}

/// What one document carries of one metric: its value, or up to [`MAX_VALUES_PER_METRIC`] of its values.
#[derive(Clone, Debug, PartialEq)]
enum Piece {
    Single(f64),
    Values(Vec<f64>),
}

impl Piece {
    fn len(&self) -> usize {
        match self {
            Piece::Single(_) => 1,
            Piece::Values(v) => v.len(),
        }
    }
}

fn check_target(target: &EmfTarget, metrics: &[EmfMetric]) -> Result<(), EmfError> {
    let ns = &target.namespace;
    let ns_ok = |c: char| c.is_ascii_alphanumeric() || "._#:/-".contains(c);
    if ns.is_empty() || ns.len() > 255 || !ns.chars().all(ns_ok) || ns.starts_with("AWS/") {
        return Err(EmfError::BadNamespace(format!("{ns:?}")));
    }
    if target.dimensions.len() > MAX_DIMENSIONS {
        return Err(EmfError::BadDimensions(format!(
            "{} dimensions, at most {MAX_DIMENSIONS}",
            target.dimensions.len()
        )));
    }
    for (key, value) in &target.dimensions {
        if key.is_empty() || value.is_empty() || key == "_aws" || metrics.iter().any(|m| m.name == key) {
            return Err(EmfError::BadDimensions(format!("{key:?} = {value:?}")));
        }
    }
    Ok(())
}

fn document(target: &EmfTarget, metrics: &[EmfMetric], doc: &[(usize, Piece)]) -> String {
    let mut out = String::with_capacity(256 + 16 * doc.iter().map(|(_, p)| p.len()).sum::<usize>());
    let _ = write!(out, "{{\"_aws\":{{\"Timestamp\":{},\"CloudWatchMetrics\":[{{\"Namespace\":", target.timestamp_ms);
    json_string(&mut out, &target.namespace);
    out.push_str(",\"Dimensions\":[[");
    for (n, (key, _)) in target.dimensions.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        json_string(&mut out, key);
    }
    out.push_str("]],\"Metrics\":[");
    for (n, (i, _)) in doc.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str("{\"Name\":");
        json_string(&mut out, metrics[*i].name);
        let _ = write!(out, ",\"Unit\":\"{}\"}}", metrics[*i].unit.as_str());
    }
    out.push_str("]}]}");
    for (key, value) in &target.dimensions {
        out.push(',');
        json_string(&mut out, key);
        out.push(':');
        json_string(&mut out, value);
    }
    for (i, piece) in doc {
        out.push(',');
        json_string(&mut out, metrics[*i].name);
        out.push(':');
        match piece {
            Piece::Single(v) => json_number(&mut out, *v),
            Piece::Values(values) => json_array(&mut out, values),
        }
    }
    out.push('}');
    out
}

fn json_array(out: &mut String, values: &[f64]) {
    out.push('[');
    for (n, v) in values.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        json_number(out, *v);
    }
    out.push(']');
}

/// A finite number; integral values without a fraction, others with Rust's shortest round-trip form.
fn json_number(out: &mut String, v: f64) {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        let _ = write!(out, "{}", v as i64);
    } else {
        let _ = write!(out, "{v}");
    }
}

fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
#[path = "emf_tests.rs"]
mod tests;
