//! Prometheus text exposition (format 0.0.4) and OpenMetrics 1.0 text, written from values the caller
//! reads: the caller walks its metrics and hands each to an [`Encoder`], which knows the two dialects.
//!
//! The dialects differ in small ways that scrapers are strict about: OpenMetrics names a counter's family
//! without `_total` and its sample with it, may carry `# UNIT` and `_created`, escapes `"` in HELP, and must
//! end with `# EOF`; 0.0.4 names the family after the sample. Histograms are recorded in microseconds and
//! exposed in seconds, with the cumulative `_bucket{le}` counts at [`PROMETHEUS_BOUNDS_US`].

use std::fmt::{self, Write as _};

use crate::family::Label;
use crate::histogram::{HistogramSnapshot, PROMETHEUS_BOUNDS_US};

/// Which text format to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`: what promtool checks and every Prometheus version reads.
    Prometheus,
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
}

impl Format {
    /// The format an HTTP `Accept` header asks for: OpenMetrics when it is accepted with a quality at
    /// least that of plain text (Prometheus 2.x sends it first, q=1), else Prometheus text, which is also
    /// the answer to no header or one naming neither.
    pub fn from_accept(accept: Option<&str>) -> Format {
        let Some(accept) = accept else { return Format::Prometheus };
        let (mut open_q, mut text_q) = (0.0f32, 0.0f32);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let mut q = 1.0f32;
            let mut version = None;
            for param in parts {
                let (key, value) = param.split_once('=').unwrap_or((param, ""));
                match key.trim().to_ascii_lowercase().as_str() {
                    "q" => q = value.trim().parse::<f32>().ok().filter(|q| q.is_finite()).unwrap_or(0.0),
                    "version" => version = Some(value.trim().trim_matches('"').to_owned()),
                    _ => {}
                }
            }
            match media.as_str() {
                // 0.0.1 is the draft OpenMetrics; what we write parses as both.
                "application/openmetrics-text" if version.as_deref().is_none_or(|v| v == "1.0.0" || v == "0.0.1") => {
                    open_q = open_q.max(q)
                }
                "text/plain" | "*/*" | "text/*" => text_q = text_q.max(q),
                _ => {}
            }
        }
        if open_q > 0.0 && open_q >= text_q { Format::OpenMetrics } else { Format::Prometheus }
    }

    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The base unit a metric is measured in; its name must end in `_<unit>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    None,
    Seconds,
    Bytes,
}

impl Unit {
    fn as_str(self) -> Option<&'static str> {
        match self {
            Unit::None => None,
            Unit::Seconds => Some("seconds"),
            Unit::Bytes => Some("bytes"),
        }
    }
}

/// What a metric is: its family name (for a counter, without `_total`), help text and unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desc {
    pub name: &'static str,
    pub help: &'static str,
    pub unit: Unit,
}

impl Desc {
    pub const fn new(name: &'static str, help: &'static str, unit: Unit) -> Desc {
        Desc { name, help, unit }
    }

    /// Whether the name follows Prometheus' rules and pgmux's: `pgmux_` prefix, snake case ASCII, no
    /// colon, no type name, ends in its unit, and no `_total` (the encoder adds it to counters).
    pub fn check(&self) -> Result<(), NameError> {
        let n = self.name;
        let fail = |rule| Err(NameError { name: n, rule });
        if !n.starts_with("pgmux_") {
            return fail(NameRule::Prefix);
        }
        if !n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') || n.contains("__") {
            return fail(NameRule::SnakeCase);
        }
        if n.ends_with("_total") || n.ends_with("_created") || n.ends_with("_bucket") || n.ends_with("_count") {
            return fail(NameRule::ReservedSuffix);
        }
        if ["_counter", "_gauge", "_histogram", "_summary"].iter().any(|t| n.contains(t)) {
            return fail(NameRule::NamesType);
        }
        if let Some(unit) = self.unit.as_str()
            && !n.ends_with(&format!("_{unit}"))
        {
            return fail(NameRule::Unit);
        }
        if self.help.is_empty() {
            return fail(NameRule::Help);
        }
        Ok(())
    }
}

/// A metric whose name (or help) breaks one of [`Desc::check`]'s rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameError {
    /// The metric's name.
    pub name: &'static str,
    /// The rule it breaks.
    pub rule: NameRule,
}

/// The naming rules of [`Desc::check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// Starts with `pgmux_`.
    Prefix,
    /// Lower-case snake_case ASCII, no `__`.
    SnakeCase,
    /// Does not end in `_total`, `_created`, `_bucket` or `_count`, which the formats add.
    ReservedSuffix,
    /// Does not name its type (`_counter`, `_gauge`, ...).
    NamesType,
    /// Ends in its unit.
    Unit,
    /// Has help text.
    Help,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.rule {
            NameRule::Prefix => "must start with pgmux_",
            NameRule::SnakeCase => "must be lower-case snake_case ASCII",
            NameRule::ReservedSuffix => "ends in a suffix the formats reserve",
            NameRule::NamesType => "names its type",
            NameRule::Unit => "must end in its unit",
            NameRule::Help => "needs help text",
        };
        write!(f, "metric name {:?}: {why}", self.name)
    }
}

impl std::error::Error for NameError {}

/// Labels of one sample: name and value pairs.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

/// Writes one exposition. Call a method per metric, then [`Encoder::finish`].
#[derive(Debug)]
pub struct Encoder {
    format: Format,
    out: String,
    /// Process start in Unix seconds: written as `_created` of counters and histograms in OpenMetrics.
    created: Option<f64>,
}

impl Encoder {
    pub fn new(format: Format) -> Encoder {
        Encoder { format, out: String::with_capacity(16 * 1024), created: None }
    }

    /// Adds `_created` samples (OpenMetrics only; 0.0.4 has no such thing) with this Unix time in seconds.
    pub fn with_created(mut self, unix_secs: f64) -> Encoder {
        self.created = Some(unix_secs).filter(|t| t.is_finite());
        self
    }

    /// A counter without labels.
    pub fn counter(&mut self, desc: &Desc, value: u64) {
        self.counter_samples(desc, &[(&[], value)]);
    }

    /// A counter with one sample per value of `L`.
    pub fn counter_family<L: Label>(&mut self, desc: &Desc, values: &[(L, u64)]) {
        let labels: Vec<[(&str, &str); 1]> = values.iter().map(|(l, _)| [(L::NAME, l.as_str())]).collect();
        let samples: Vec<(Labels<'_>, u64)> = labels.iter().zip(values).map(|(l, (_, v))| (&l[..], *v)).collect();
        self.counter_samples(desc, &samples);
    }

    /// A counter with any labels, one sample each (label sets must differ).
    pub fn counter_samples(&mut self, desc: &Desc, samples: &[(Labels<'_>, u64)]) {
        self.header(desc, "counter");
        let name = format!("{}_total", desc.name);
        for (labels, value) in samples {
            self.sample(&name, labels, &value.to_string());
            if let (Format::OpenMetrics, Some(created)) = (self.format, self.created) {
                self.sample(&format!("{}_created", desc.name), labels, &float(created));
            }
        }
    }

    /// A gauge without labels.
    pub fn gauge(&mut self, desc: &Desc, value: i64) {
        self.gauge_samples(desc, &[(&[], value)]);
    }

    /// A gauge with one sample per value of `L`.
    pub fn gauge_family<L: Label>(&mut self, desc: &Desc, values: &[(L, i64)]) {
        let labels: Vec<[(&str, &str); 1]> = values.iter().map(|(l, _)| [(L::NAME, l.as_str())]).collect();
        let samples: Vec<(Labels<'_>, i64)> = labels.iter().zip(values).map(|(l, (_, v))| (&l[..], *v)).collect();
        self.gauge_samples(desc, &samples);
    }

    /// A gauge with any labels, one sample each.
    pub fn gauge_samples(&mut self, desc: &Desc, samples: &[(Labels<'_>, i64)]) {
        self.header(desc, "gauge");
        for (labels, value) in samples {
            self.sample(desc.name, labels, &value.to_string());
        }
    }

    /// A gauge of fractional values (seconds), with any labels, one sample each.
    pub fn gauge_float_samples(&mut self, desc: &Desc, samples: &[(Labels<'_>, f64)]) {
        self.header(desc, "gauge");
        for (labels, value) in samples {
            self.sample(desc.name, labels, &float(*value));
        }
    }

    /// A latency histogram recorded in microseconds, exposed in seconds (`desc.unit` is `Seconds`).
    pub fn histogram(&mut self, desc: &Desc, snap: &HistogramSnapshot) {
        self.header(desc, "histogram");
        let bucket = format!("{}_bucket", desc.name);
        for bound in PROMETHEUS_BOUNDS_US {
            let le = float(bound as f64 / 1e6);
            self.sample(&bucket, &[("le", &le)], &snap.count_below(bound).to_string());
        }
        let count = snap.count().to_string();
        self.sample(&bucket, &[("le", "+Inf")], &count);
        self.sample(&format!("{}_sum", desc.name), &[], &float(snap.sum_us() as f64 / 1e6));
        self.sample(&format!("{}_count", desc.name), &[], &count);
        if let (Format::OpenMetrics, Some(created)) = (self.format, self.created) {
            self.sample(&format!("{}_created", desc.name), &[], &float(created));
        }
    }

    /// The text, with `# EOF` for OpenMetrics.
    pub fn finish(mut self) -> String {
        if self.format == Format::OpenMetrics {
            self.out.push_str("# EOF\n");
        }
        self.out
    }

    fn header(&mut self, desc: &Desc, kind: &str) {
        debug_assert_eq!(desc.check(), Ok(()));
        let out = &mut self.out;
        match self.format {
            Format::Prometheus => {
                // 0.0.4 names a counter family after its sample.
                let name = if kind == "counter" { format!("{}_total", desc.name) } else { desc.name.to_owned() };
                let _ = writeln!(out, "# HELP {name} {}", escape(desc.help, false));
                let _ = writeln!(out, "# TYPE {name} {kind}");
            }
            Format::OpenMetrics => {
                let _ = writeln!(out, "# TYPE {} {kind}", desc.name);
                if let Some(unit) = desc.unit.as_str() {
                    let _ = writeln!(out, "# UNIT {} {unit}", desc.name);
                }
                let _ = writeln!(out, "# HELP {} {}", desc.name, escape(desc.help, true));
            }
        }
    }

    fn sample(&mut self, name: &str, labels: Labels<'_>, value: &str) {
        let out = &mut self.out;
        out.push_str(name);
        if !labels.is_empty() {
            out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{k}=\"{}\"", escape(v, true));
            }
            out.push('}');
        }
        out.push(' ');
        out.push_str(value);
        out.push('\n');
    }
}

/// Escapes `\`, line feeds and (in label values and OpenMetrics HELP) `"`.
fn escape(s: &str, quote: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// A float as both formats read it: Rust's shortest round-trip form, which never uses an exponent and
/// always parses back to the same value.
fn float(v: f64) -> String {
    match v {
        v if v.is_finite() => format!("{v}"),
        v if v.is_nan() => "NaN".into(),
        v if v > 0.0 => "+Inf".into(),
        _ => "-Inf".into(),
    }
}

#[cfg(test)]
#[path = "expo_tests.rs"]
mod tests;
