//! The `lockman_evicting_server` gauge: 1 once a manager started on a server whose eviction
//! policy can drop lock keys, 0 once one started on a `noeviction` server. A binary of its
//! own, since the gauge is process-wide and any other test's start would set it. Run with
//! `cargo test --features metrics --test eviction_gauge`.
#![cfg(feature = "metrics")]

mod support;

use lockman::{Config, LockManager};
use support::recorder::recorded;
use support::{Options, RedisServer};

fn gauge() -> Option<f64> {
    recorded()
        .values
        .lock()
        .unwrap()
        .get("lockman_evicting_server")
        .copied()
}

#[tokio::test]
async fn the_gauge_follows_the_eviction_policy_of_the_server_started_on() {
    recorded(); // installed before anything is recorded
    let evicting = RedisServer::start_with(Options {
        args: vec!["--maxmemory-policy".into(), "volatile-lru".into()],
        ..Options::default()
    });
    let manager = LockManager::start(Config::new(evicting.url()))
        .await
        .unwrap();
    assert_eq!(gauge(), Some(1.0));
    manager.shutdown().await;
    let safe = RedisServer::start();
    let manager = LockManager::start(Config::new(safe.url())).await.unwrap();
    assert_eq!(gauge(), Some(0.0));
    manager.shutdown().await;
}
