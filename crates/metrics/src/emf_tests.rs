//! EMF documents: golden text, the specification's limits, and bad targets.

use serde_json::Value;

use super::*;

fn target() -> EmfTarget {
    EmfTarget {
        namespace: "pgmux".into(),
        dimensions: vec![("FunctionName".into(), "orders-api".into())],
        timestamp_ms: 1_700_000_000_123,
    }
}

fn parse(lines: &[String]) -> Vec<Value> {
    lines.iter().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// Every metric a document declares is at its root with a number or an array of at most 100 numbers.
fn check_document(doc: &Value) {
    let directive = &doc["_aws"]["CloudWatchMetrics"][0];
    let declared = directive["Metrics"].as_array().unwrap();
    assert!(!declared.is_empty() && declared.len() <= MAX_METRICS_PER_DOCUMENT);
    for m in declared {
        let value = &doc[m["Name"].as_str().unwrap()];
        match value {
            Value::Number(_) => {}
            Value::Array(a) => {
                assert!(!a.is_empty() && a.len() <= MAX_VALUES_PER_METRIC && a.iter().all(Value::is_number))
            }
            other => panic!("{m}: {other}"),
        }
    }
    for key in directive["Dimensions"][0].as_array().unwrap() {
        assert!(doc[key.as_str().unwrap()].is_string());
    }
}

#[test]
fn golden_document() {
    let metrics = [
        EmfMetric { name: "DatabaseConnections", unit: EmfUnit::Count, value: EmfValue::Single(3.0) },
        EmfMetric {
            name: "QueryDatabaseResponseLatency",
            unit: EmfUnit::Microseconds,
            value: EmfValue::Values(vec![812.0, 903.5, 1200.0]),
        },
    ];
    let lines = emf_lines(&target(), &metrics).unwrap();
    assert_eq!(
        lines,
        vec![
            "{\"_aws\":{\"Timestamp\":1700000000123,\"CloudWatchMetrics\":[{\"Namespace\":\"pgmux\",\"Dimensions\":\
             [[\"FunctionName\"]],\"Metrics\":[{\"Name\":\"DatabaseConnections\",\"Unit\":\"Count\"},{\"Name\":\
             \"QueryDatabaseResponseLatency\",\"Unit\":\"Microseconds\"}]}]},\"FunctionName\":\"orders-api\",\
             \"DatabaseConnections\":3,\"QueryDatabaseResponseLatency\":[812,903.5,1200]}"
        ]
    );
    check_document(&parse(&lines)[0]);
}

#[test]
fn long_arrays_are_split_across_documents() {
    let values: Vec<f64> = (0..250).map(f64::from).collect();
    let metrics = [
        EmfMetric { name: "Latency", unit: EmfUnit::Microseconds, value: EmfValue::Values(values.clone()) },
        EmfMetric { name: "Count", unit: EmfUnit::Count, value: EmfValue::Single(7.0) },
    ];
    let docs = parse(&emf_lines(&target(), &metrics).unwrap());
    assert_eq!(docs.len(), 3);
    docs.iter().for_each(check_document);
    let mut seen: Vec<f64> =
        docs.iter().flat_map(|d| d["Latency"].as_array().unwrap().clone()).map(|v| v.as_f64().unwrap()).collect();
    seen.sort_by(f64::total_cmp);
    assert_eq!(seen, values, "every value sent once");
    assert_eq!(docs.iter().filter(|d| d.get("Count").is_some()).count(), 1, "a single value goes once");
}

#[test]
fn many_metrics_are_split_at_one_hundred() {
    // Names are &'static in pgmux's catalogue; a test may leak a few.
    let metrics: Vec<EmfMetric> = (0..150)
        .map(|i| EmfMetric {
            name: Box::leak(format!("M{i:03}").into_boxed_str()),
            unit: EmfUnit::Count,
            value: EmfValue::Single(1.0),
        })
        .collect();
    let docs = parse(&emf_lines(&target(), &metrics).unwrap());
    assert_eq!(docs.len(), 2);
    let per_doc: Vec<usize> =
        docs.iter().map(|d| d["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap().len()).collect();
    assert_eq!(per_doc, vec![100, 50]);
    docs.iter().for_each(check_document);
}

#[test]
fn documents_stay_small_with_many_long_arrays() {
    let names = ["A", "B", "C", "D", "E", "F", "G", "H"];
    let values: Vec<f64> = (0..1000).map(|i| 1e6 + f64::from(i) / 3.0).collect();
    let metrics: Vec<EmfMetric> = names
        .iter()
        .map(|n| EmfMetric { name: n, unit: EmfUnit::Microseconds, value: EmfValue::Values(values.clone()) })
        .collect();
    let lines = emf_lines(&target(), &metrics).unwrap();
    for line in &lines {
        assert!(line.len() < 256 * 1024, "{} bytes", line.len());
    }
    let docs = parse(&lines);
    docs.iter().for_each(check_document);
    let sent: usize = docs
        .iter()
        .map(|d| names.iter().filter_map(|n| d.get(*n)).map(|a| a.as_array().unwrap().len()).sum::<usize>())
        .sum();
    assert_eq!(sent, 8_000);
}

#[test]
fn non_finite_and_empty_values_are_dropped() {
    let metrics = [
        EmfMetric { name: "Nan", unit: EmfUnit::Count, value: EmfValue::Single(f64::NAN) },
        EmfMetric { name: "Empty", unit: EmfUnit::Microseconds, value: EmfValue::Values(vec![]) },
        EmfMetric {
            name: "Mixed",
            unit: EmfUnit::Microseconds,
            value: EmfValue::Values(vec![1.0, f64::INFINITY, 2.0]),
        },
    ];
    let docs = parse(&emf_lines(&target(), &metrics).unwrap());
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0]["Mixed"], serde_json::json!([1, 2]));
    assert!(docs[0].get("Nan").is_none() && docs[0].get("Empty").is_none());
    assert_eq!(docs[0]["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap().len(), 1);
    assert!(emf_lines(&target(), &[]).unwrap().is_empty(), "nothing to say, no line");
}

#[test]
fn strings_are_json_escaped() {
    let mut t = target();
    t.dimensions[0].1 = "fn \"quoted\" \\ \n\u{1} é".into();
    let metrics = [EmfMetric { name: "X", unit: EmfUnit::None, value: EmfValue::Single(1.5) }];
    let lines = emf_lines(&t, &metrics).unwrap();
    assert_eq!(parse(&lines)[0]["FunctionName"], "fn \"quoted\" \\ \n\u{1} é");
    assert!(!lines[0].contains('\n'), "one line");
}

#[test]
fn bad_targets_are_refused() {
    let m = [EmfMetric { name: "X", unit: EmfUnit::Count, value: EmfValue::Single(1.0) }];
    for ns in ["", "AWS/RDS", "has space", &"n".repeat(256)] {
        let t = EmfTarget { namespace: ns.into(), ..target() };
        assert!(matches!(emf_lines(&t, &m), Err(EmfError::BadNamespace(_))), "{ns:?}");
    }
    let many = EmfTarget { dimensions: (0..10).map(|i| (format!("D{i}"), "v".into())).collect(), ..target() };
    assert!(matches!(emf_lines(&many, &m), Err(EmfError::BadDimensions(_))));
    let clash = EmfTarget { dimensions: vec![("X".into(), "v".into())], ..target() };
    assert!(matches!(emf_lines(&clash, &m), Err(EmfError::BadDimensions(_))));
    let empty = EmfTarget { dimensions: vec![("FunctionName".into(), String::new())], ..target() };
    assert!(matches!(emf_lines(&empty, &m), Err(EmfError::BadDimensions(_))));
}
