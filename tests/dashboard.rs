//! The Grafana dashboard (dashboards/lockman.json) queries only series lockman exports: every
//! `lockman_*` name in a panel's `expr` is one of the metric names in src/metrics.rs (a
//! histogram's through its Prometheus `_bucket`, `_sum` or `_count` series). And, with the
//! `metrics` feature, a running exporter serves them: the Prometheus exporter the README
//! recommends, configured as it says, scraped over HTTP after lockman did some work, serves every
//! series every panel queries, with samples and the labels the panel groups by.

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

/// The `by (…)` labels of a PromQL expression.
#[cfg(feature = "metrics")]
fn grouped_by(expr: &str) -> BTreeSet<String> {
    let mut labels = BTreeSet::new();
    for after in expr.split("by (").skip(1) {
        let list = after.split(')').next().unwrap_or_default();
        labels.extend(
            list.split(',')
                .map(|l| l.trim().to_owned())
                .filter(|l| !l.is_empty() && l != "le"),
        );
    }
    labels
}

#[cfg(feature = "metrics")]
mod support;

/// The exporter the README's Metrics section recommends, as it configures it, serving
/// `/metrics` on a loopback port; lockman holds, waits, loses, renews and reconnects; then every
/// series every panel queries must be in a scrape, with samples (a `_bucket` series with a
/// non-zero `+Inf` count: what `histogram_quantile` needs) and with the labels it is grouped by.
#[cfg(feature = "metrics")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scraped_exporter_serves_every_series_every_panel_queries_with_data() {
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};

    use lockman::{Config, LockManager};
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let root = env!("CARGO_MANIFEST_DIR");
    // The buckets the README gives, which the web example must give too.
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let metrics_section = readme.split("\n## Metrics\n").nth(1).expect("## Metrics");
    let call = metrics_section
        .split("Matcher::Prefix(\"lockman_\".into()),")
        .nth(1)
        .expect("the README's Metrics section gives lockman's histograms buckets");
    let list = call
        .split_once("&[")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .expect("a bucket list");
    let buckets: Vec<f64> = list
        .split(',')
        .map(|b| b.trim().parse().expect("a bucket bound"))
        .collect();
    assert!(buckets.len() >= 5, "{buckets:?}");
    // Compared without whitespace: rustfmt lays the example's list out as it likes.
    let bare = |text: &str| text.split_whitespace().collect::<String>();
    let example = std::fs::read_to_string(format!("{root}/examples/web.rs")).unwrap();
    assert!(
        bare(&example).contains(&bare(&format!(
            "Matcher::Prefix(\"lockman_\".into()), &[{list}"
        ))),
        "examples/web.rs gives lockman's histograms other buckets than the README: {list}"
    );

    let port = support::free_port();
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Prefix("lockman_".into()), &buckets)
        .unwrap()
        .with_http_listener(([127, 0, 0, 1], port))
        .install()
        .unwrap();

    let server = support::RedisServer::start();
    let mut raw = server.conn();
    let config = Config::new(server.url()).watchdog_timeout(Duration::from_millis(300));
    let mgr = LockManager::start(config).await.unwrap();

    // Holds, acquires, a waiter that waits across renewals (contention, renewals).
    let held = mgr.lock("a").acquire().await.unwrap();
    assert!(
        mgr.lock("a")
            .try_acquire_for(Duration::from_millis(50))
            .await
            .unwrap()
            .is_none()
    );
    let waiter = {
        let lock = mgr.lock("a");
        tokio::spawn(async move { lock.acquire().await.unwrap().release().await.unwrap() })
    };
    // Permits held, a permit wait, and a permit lost (its key reclaimed behind its back).
    let sem = mgr.permit_semaphore("p");
    assert!(sem.try_set_permits(1).await.unwrap());
    let permit = sem.acquire(1).await.unwrap();
    assert!(
        sem.try_acquire_for(1, Duration::from_millis(50))
            .await
            .unwrap()
            .is_none()
    );
    let _: () = redis::cmd("DEL")
        .arg("{p}:timeout")
        .query(&mut raw)
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), permit.lost())
        .await
        .expect("the permit's loss is found by its renewal");
    // A hold lost: its lease ran out before its release.
    let leased = mgr
        .lock("l")
        .acquire_with_lease(Duration::from_millis(50))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), leased.lost())
        .await
        .expect("the lease ran out");

    let scrape = || async move {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
            .await
            .ok()?
            .ok()?;
        let raw = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = raw.split_once("\r\n\r\n")?;
        head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
    };
    // Every sample by series name: its labels and value.
    type Samples = BTreeMap<String, Vec<(BTreeMap<String, String>, f64)>>;
    let parse = |text: &str| -> Samples {
        let mut samples = Samples::new();
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
                .collect();
            let value = value.parse().unwrap_or(f64::NAN);
            samples
                .entry(name.to_owned())
                .or_default()
                .push((labels, value));
        }
        samples
    };

    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{root}/dashboards/lockman.json")).unwrap(),
    )
    .unwrap();
    let mut queries = Vec::new();
    exprs(&dashboard, &mut queries);
    // What a query lacks in a scrape: a series without samples, a bucket series whose `+Inf`
    // count is 0, a label it groups by.
    let lacks = |samples: &Samples| -> Vec<String> {
        let mut lacking = Vec::new();
        for q in &queries {
            for name in metric_names(q) {
                let Some(series) = samples.get(&name).filter(|s| !s.is_empty()) else {
                    lacking.push(format!("{name} (no samples), queried by {q}"));
                    continue;
                };
                if name.ends_with("_bucket") {
                    let counted = series.iter().any(|(labels, v)| {
                        labels.get("le").is_some_and(|le| le == "+Inf") && *v > 0.0
                    });
                    if !counted {
                        lacking.push(format!("{name} (no +Inf bucket above 0), queried by {q}"));
                    }
                }
                for label in grouped_by(q) {
                    if !series.iter().any(|(labels, _)| labels.contains_key(&label)) {
                        lacking.push(format!("{name} (no {label} label), queried by {q}"));
                    }
                }
            }
        }
        lacking
    };

    // The contention gauges are set at a renewal tick while the waiter waits: wait for them
    // (and everything else so far) to be served before the waiter gets its turn.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut lacking = vec!["no scrape yet".to_owned()];
    while Instant::now() < deadline {
        if let Some(text) = scrape().await {
            lacking = lacks(&parse(&text));
            if lacking
                .iter()
                .all(|l| l.starts_with("lockman_reconnects_total"))
            {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    held.release().await.unwrap();
    waiter.await.unwrap();

    // Every connection killed, of both types: the pub/sub one may still be subscribed to a
    // channel a waiter's grant kept (until the name's actor departs), and is then of type
    // pubsub, not normal. The pub/sub connection is opened again, and counted.
    support::commands::kill_clients(&mut raw, &["normal", "pubsub"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut text = String::new();
    while Instant::now() < deadline {
        if let Some(scraped) = scrape().await {
            text = scraped;
            lacking = lacks(&parse(&text));
            if lacking.is_empty() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        lacking.is_empty(),
        "the dashboard would show no data for:\n{}\n\nscraped:\n{text}",
        lacking.join("\n")
    );
    // Histograms are served as histograms, not summaries.
    assert!(
        !text.contains("lockman_acquire_wait_seconds{kind=\"lock\",quantile="),
        "{text}"
    );
    mgr.shutdown().await;
}
