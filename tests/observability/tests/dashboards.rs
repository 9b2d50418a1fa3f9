//! The dashboards in deploy/ read metrics pgmux has: every `pgmux_*` series a Grafana query names is one
//! pgmux exports (a family of the catalogue, with `_total`, `_bucket`, `_sum` or `_count` where the type
//! has them), and every CloudWatch widget names a metric the EMF lines carry. A renamed metric fails here
//! rather than leaving an empty panel.

use std::collections::BTreeSet;

use pgmux_metrics::{DESCS, Metrics, cloudwatch_metrics};
use pgmux_observability_tests::repo_root;
use serde_json::Value;

/// The `pgmux_…` words in a PromQL expression.
fn series_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("pgmux_") {
        let tail = &rest[i..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

#[test]
fn the_grafana_dashboard_queries_only_series_pgmux_exports() {
    let text = std::fs::read_to_string(repo_root().join("deploy/grafana/pgmux-dashboard.json")).expect("dashboard");
    let dash: Value = serde_json::from_str(&text).expect("valid JSON");
    let exported: BTreeSet<String> = DESCS
        .iter()
        .flat_map(|d| ["", "_total", "_bucket", "_sum", "_count"].map(|s| format!("{}{s}", d.name)))
        .collect();
    let mut exprs = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            exprs.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    assert!(exprs.len() >= 20, "{} queries", exprs.len());
    for expr in &exprs {
        let names = series_names(expr);
        assert!(!names.is_empty(), "a query without a pgmux series: {expr}");
        for name in names {
            assert!(exported.contains(&name), "{name} is not exported by pgmux (in {expr})");
        }
    }
}

#[test]
fn the_cloudwatch_dashboards_name_only_metrics_pgmux_sends() {
    let m = Metrics::new().snapshot();
    let sent: BTreeSet<&str> = cloudwatch_metrics(&m, &m, 10).iter().map(|x| x.name).collect();
    let root = repo_root();
    let terraform = std::fs::read_to_string(root.join("deploy/lambda/terraform/dashboard.json.tftpl")).expect("tf");
    let sam = std::fs::read_to_string(root.join("deploy/lambda/sam/template.yaml")).expect("sam");
    let body_start = sam.find("DashboardBody: !Sub |").expect("a dashboard in the SAM template");
    let sam_body: String = sam[body_start..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("        ") || l.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    for (what, body) in [("terraform", terraform), ("sam", sam_body)] {
        let dash: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{what}: not JSON: {e}"));
        let mut named = 0;
        for widget in dash["widgets"].as_array().expect("widgets") {
            for metric in widget["properties"]["metrics"].as_array().expect("metrics") {
                assert_eq!(metric[0], "pgmux", "{what}: namespace");
                let name = metric[1].as_str().expect("a metric name");
                assert!(sent.contains(name), "{what}: {name} is not a metric pgmux sends");
                assert_eq!(metric[2], "FunctionName", "{what}: dimension");
                named += 1;
            }
        }
        assert!(named >= 20, "{what}: {named} metrics");
    }
}
