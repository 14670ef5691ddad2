//! The Redis layout and messages of the reentrant lock, checked with a raw client: what a
//! Redisson client on the same server would see (protocol.md, "Reentrant lock").

mod support;

use std::collections::HashMap;
use std::time::Duration;

use lockman::{Config, LockManager};
use redis::Commands;
use support::RedisServer;

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url()))
        .await
        .expect("manager starts")
}

fn hash(conn: &mut redis::Connection, key: &str) -> HashMap<String, String> {
    conn.hgetall(key).expect("HGETALL")
}

fn pttl(conn: &mut redis::Connection, key: &str) -> i64 {
    conn.pttl(key).expect("PTTL")
}

#[tokio::test]
async fn acquire_writes_holder_field_count_and_watchdog_ttl() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.lock("orders");
    let holder = lock.holder_id();
    assert_eq!(holder, format!("{}:1", mgr.client_id()));
    assert_eq!(holder.len(), 36 + 2);

    let guard = lock.acquire().await.unwrap();
    assert_eq!(
        hash(&mut raw, "orders"),
        HashMap::from([(holder.clone(), "1".to_owned())])
    );
    let ttl = pttl(&mut raw, "orders");
    assert!(
        (29_000..=30_000).contains(&ttl),
        "watchdog lease is 30 s, PTTL {ttl}"
    );

    guard.release().await.unwrap();
    let exists: bool = raw.exists("orders").unwrap();
    assert!(!exists, "the final release deletes the key");
    mgr.shutdown().await;
}

#[tokio::test]
async fn lease_sets_pttl_to_the_lease() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.lock("leased");
    let _guard = lock
        .acquire_with_lease(Duration::from_millis(5_000))
        .await
        .unwrap();
    let ttl = pttl(&mut raw, "leased");
    assert!((4_000..=5_000).contains(&ttl), "PTTL {ttl}");
    let ttl = lock.remaining_ttl().await.unwrap().unwrap();
    assert!(
        ttl <= Duration::from_millis(5_000) && ttl >= Duration::from_millis(4_000),
        "{ttl:?}"
    );
}

#[tokio::test]
async fn reentrant_counts_go_0_1_0_2_1_0() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.lock("re");
    let holder = lock.holder_id();
    let count =
        |raw: &mut redis::Connection| -> Option<String> { raw.hget("re", &holder).unwrap() };

    assert_eq!(lock.hold_count().await.unwrap(), 0);
    assert_eq!(count(&mut raw), None);
    let g = lock.acquire().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    assert_eq!(count(&mut raw).as_deref(), Some("1"));
    g.release().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    assert_eq!(count(&mut raw), None);

    let g1 = lock.acquire().await.unwrap();
    let g2 = lock.clone().acquire().await.unwrap(); // a clone shares the holder: re-entry
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    assert_eq!(count(&mut raw).as_deref(), Some("2"));
    g1.release().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    assert!(lock.is_locked().await.unwrap());
    g2.release().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    assert!(!lock.is_locked().await.unwrap());
    let exists: bool = raw.exists("re").unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn two_handles_are_two_holders() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let (a, b) = (mgr.lock("x"), mgr.lock("x"));
    assert_ne!(a.holder_id(), b.holder_id());
    let _g = a.acquire().await.unwrap();
    assert!(b.try_acquire().await.unwrap().is_none());
    assert!(a.is_held().await.unwrap());
    assert!(!b.is_held().await.unwrap());
    assert!(b.is_locked().await.unwrap());
}

#[tokio::test]
async fn final_release_publishes_zero_on_the_unlock_channel() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let mut sub = server.client().get_connection().unwrap();
    let mut pubsub = sub.as_pubsub();
    pubsub.subscribe("redisson_lock__channel:{jobs}").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();

    let lock = mgr.lock("jobs");
    let g1 = lock.acquire().await.unwrap();
    let g2 = lock.acquire().await.unwrap();
    g1.release().await.unwrap(); // not final: nothing published
    g2.release().await.unwrap();
    let msg = pubsub.get_message().expect("a message within 5 s");
    assert_eq!(msg.get_channel_name(), "redisson_lock__channel:{jobs}");
    assert_eq!(msg.get_payload::<String>().unwrap(), "0");
    pubsub
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(
        pubsub.get_message().is_err(),
        "exactly one message for the final release"
    );
}

#[tokio::test]
async fn force_unlock_deletes_publishes_and_reports() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.lock("forced");
    assert!(
        !lock.force_unlock().await.unwrap(),
        "nobody holds it: Ok(false)"
    );
    let guard = lock.acquire().await.unwrap();
    let other = mgr.lock("forced");
    assert!(other.force_unlock().await.unwrap());
    let exists: bool = raw.exists("forced").unwrap();
    assert!(!exists);
    let err = guard.release().await.unwrap_err();
    assert!(matches!(err, lockman::LockError::NotHeld { .. }), "{err:?}");
}

#[tokio::test]
async fn a_redisson_style_holder_excludes_lockman() {
    // A hold written the way Redisson writes it (another client id, thread 1) is respected.
    let server = RedisServer::start();
    let mut raw = server.conn();
    // The manager first: its start, slow on a loaded machine, must not eat into the hold's
    // 400 ms, which are counted from its write.
    let mgr = manager(&server).await;
    let lock = mgr.lock("shared");
    let started = std::time::Instant::now();
    let _: () = raw
        .hset("shared", "5b2e8f43-0c0e-4d43-9a38-6c1f9b1f6c11:1", 1)
        .unwrap();
    let _: () = raw.pexpire("shared", 400).unwrap();
    assert!(lock.try_acquire().await.unwrap().is_none());
    let guard = lock.acquire().await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    guard.release().await.unwrap();
}
