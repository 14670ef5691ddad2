//! Contention series (issue 38): under 10,000 contended names, the per-name gauges name at most
//! `Config::contention_top_k` of them. A binary of its own, with its own recorder: its 10,000
//! acquires would move the counters tests/metrics.rs checks exactly.
//! Run with `cargo test --features metrics --test contention`.
#![cfg(feature = "metrics")]

mod support;

use std::time::Duration;

use lockman::{Config, LockError, LockManager};
use support::RedisServer;
use support::recorder::recorded;

/// 10,000 names, each waited on once: the per-name contention gauges name at most K of them
/// (the names waited on longest in a tick), and the count of contended names is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_series_stay_within_the_top_k_names() {
    const NAMES: usize = 10_000;
    const K: usize = 5;
    recorded();
    let server = RedisServer::start();
    let holder = LockManager::start(Config::new(server.url())).await.unwrap();
    // A long tick (4 s), so that the waits below fall in one or two windows.
    let waiter = LockManager::start(
        Config::new(server.url())
            .watchdog_timeout(Duration::from_secs(12))
            .contention_top_k(K),
    )
    .await
    .unwrap();
    let names: Vec<String> = (0..NAMES).map(|i| format!("c10k:{i}")).collect();
    let mut guards = Vec::with_capacity(NAMES);
    for chunk in names.chunks(500) {
        let got = futures_util::future::join_all(chunk.iter().map(|n| {
            let lock = holder.lock(n);
            async move { lock.acquire_with_lease(Duration::from_secs(60)).await }
        }))
        .await;
        guards.extend(got.into_iter().map(Result::unwrap));
    }
    let started = std::time::Instant::now();
    let mut busy = 0;
    // A hundred waits at a time: each is answered busy within milliseconds. Five hundred at once
    // on one connection queued their replies past 250 ms on a loaded machine, and a wait whose
    // reply is that late at its deadline is told Redis is away (docs/outages.md), not busy.
    for chunk in names.chunks(100) {
        let got = futures_util::future::join_all(chunk.iter().map(|n| {
            let lock = waiter.lock(n);
            async move { lock.try_acquire_for(Duration::from_millis(20)).await }
        }))
        .await;
        for g in got {
            match g {
                Ok(None) => busy += 1,
                // A reply later than the last try's grace is the documented outage verdict
                // (docs/outages.md): seen here with both cores busy. Still a wait.
                Err(LockError::Unavailable { .. }) => {}
                other => panic!("a wait behind a holder ended {other:?}"),
            }
        }
    }
    assert!(busy > 0, "no wait was answered busy");
    let ticks_during = started.elapsed().as_secs() / 4 + 2;
    // The next tick reports the window.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let values = recorded().values.lock().unwrap().clone();
    let labelled: Vec<(&String, &f64)> = values
        .iter()
        .filter(|(k, _)| k.starts_with("lockman_contended_wait_seconds{name=c10k:"))
        .collect();
    let nonzero = labelled.iter().filter(|(_, v)| **v > 0.0).count();
    assert!(nonzero <= K, "{nonzero} names shown at once: {labelled:?}");
    assert!(
        labelled.len() as u64 <= K as u64 * ticks_during,
        "{} names over {ticks_during} ticks",
        labelled.len()
    );
    assert!(!labelled.is_empty());
    drop(guards);
    holder.shutdown().await;
    waiter.shutdown().await;
}
