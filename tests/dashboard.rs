//! The Grafana dashboard (dashboards/lockman.json) queries only series lockman exports: every
//! `lockman_*` name in a panel's `expr` is one of the metric names in src/metrics.rs (a
//! histogram's through its Prometheus `_bucket`, `_sum` or `_count` series).

use std::collections::BTreeSet;

use serde_json::Value;

/// Every `lockman_…` identifier in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("lockman_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

fn exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr", Value::String(e)) => out.push(e.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

#[test]
fn every_series_the_dashboard_queries_is_exported() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{root}/dashboards/lockman.json")).unwrap(),
    )
    .expect("the dashboard is JSON");
    // The names in src/metrics.rs's `counter!("…"`, `gauge!("…"`, `histogram!("…"` calls
    // (not its comments).
    let source = std::fs::read_to_string(format!("{root}/src/metrics.rs")).unwrap();
    let exported: BTreeSet<String> = source
        .split("!(\"")
        .skip(1)
        .flat_map(|after| metric_names(after.split('"').next().unwrap_or_default()))
        .collect();
    assert!(exported.len() >= 10, "{exported:?}");
    let mut queries = Vec::new();
    exprs(&dashboard, &mut queries);
    assert!(queries.len() >= 10, "{queries:?}");
    let mut queried = BTreeSet::new();
    for q in &queries {
        let names = metric_names(q);
        assert!(!names.is_empty(), "a query of no lockman series: {q}");
        queried.extend(names);
    }
    for name in &queried {
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .filter(|b| exported.contains(*b))
            .unwrap_or(name);
        assert!(
            exported.contains(base),
            "the dashboard queries {name}, which lockman does not export"
        );
    }
    // What the issue asks the dashboard to show.
    for wanted in [
        "lockman_holds",
        "lockman_waiters",
        "lockman_acquire_wait_seconds_bucket",
        "lockman_lost_total",
        "lockman_renewals_total",
        "lockman_contended_wait_seconds",
    ] {
        assert!(queried.contains(wanted), "no panel shows {wanted}");
    }
}
