//! Bad input gets a typed error and changes nothing in Redis.

mod support;

use std::time::Duration;

use lockman::{Config, LockError, LockManager};
use redis::Commands;
use support::RedisServer;

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url()))
        .await
        .expect("manager starts")
}

fn dbsize(raw: &mut redis::Connection) -> u64 {
    redis::cmd("DBSIZE").query(raw).unwrap()
}

fn invalid<T: std::fmt::Debug>(res: Result<T, LockError>) -> bool {
    matches!(res, Err(LockError::InvalidArgument { .. }))
}

#[tokio::test]
async fn an_empty_name_is_refused_everywhere() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.lock("");
    assert!(invalid(lock.acquire().await));
    assert!(invalid(lock.try_acquire().await));
    assert!(invalid(
        lock.try_acquire_for(Duration::from_millis(10)).await
    ));
    assert!(invalid(lock.force_unlock().await));
    assert!(invalid(lock.is_locked().await));
    assert!(invalid(lock.hold_count().await));
    assert!(invalid(lock.remaining_ttl().await));
    assert!(invalid(mgr.lock_actor("").await));
    assert_eq!(dbsize(&mut raw), 0);
}

#[tokio::test]
async fn zero_and_sub_millisecond_leases_are_refused() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.lock("lease");
    assert!(invalid(lock.acquire_with_lease(Duration::ZERO).await));
    assert!(invalid(
        lock.acquire_with_lease(Duration::from_micros(999)).await
    ));
    assert!(invalid(
        lock.try_acquire_with_lease(Duration::from_millis(5), Duration::ZERO)
            .await
    ));
    assert!(invalid(
        lock.acquire_with_lease(Duration::from_secs(u64::MAX)).await
    ));
    assert_eq!(dbsize(&mut raw), 0);
    // The handle still works afterwards.
    drop(
        lock.acquire_with_lease(Duration::from_millis(1))
            .await
            .unwrap(),
    );
}

#[tokio::test]
async fn settings_out_of_range_are_refused() {
    let server = RedisServer::start();
    for config in [
        Config::new(server.url()).watchdog_timeout(Duration::ZERO),
        Config::new(server.url()).watchdog_timeout(Duration::from_millis(29)),
        Config::new(server.url()).connect_timeout(Duration::ZERO),
        Config::new(server.url()).response_timeout(Duration::ZERO),
    ] {
        assert!(invalid(LockManager::start(config).await));
    }
}

#[tokio::test]
async fn a_key_of_another_type_is_reported_and_left_alone() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let _: () = raw.set("text", "keep me").unwrap();
    let _: () = raw.rpush("list", "a").unwrap();
    let mgr = manager(&server).await;
    for name in ["text", "list"] {
        let lock = mgr.lock(name);
        let wrong = |e: &LockError| matches!(e, LockError::WrongType { key } if key == name);
        // `acquire` waits forever for a busy lock, but not for something that is no lock.
        let err = tokio::time::timeout(Duration::from_secs(2), lock.acquire())
            .await
            .unwrap()
            .unwrap_err();
        assert!(wrong(&err), "{err:?}");
        assert!(!err.is_retryable());
        assert!(wrong(&lock.try_acquire().await.unwrap_err()));
        assert!(wrong(&lock.force_unlock().await.unwrap_err()));
        assert!(wrong(&lock.is_locked().await.unwrap_err()));
        assert!(wrong(&lock.hold_count().await.unwrap_err()));
    }
    assert_eq!(raw.get::<_, String>("text").unwrap(), "keep me");
    assert_eq!(
        raw.lrange::<_, Vec<String>>("list", 0, -1).unwrap(),
        vec!["a"]
    );
    assert_eq!(
        raw.ttl::<_, i64>("text").unwrap(),
        -1,
        "no expiry was set on it"
    );
}

#[tokio::test]
async fn releasing_a_lost_lock_says_not_held() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let guard = mgr
        .lock("short")
        .acquire_with_lease(Duration::from_millis(50))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let err = guard.release().await.unwrap_err();
    match err {
        LockError::NotHeld { name, holder } => {
            assert_eq!(name, "short");
            assert!(holder.ends_with(":1"), "{holder}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn force_unlocking_a_free_lock_is_ok_false() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    assert!(!mgr.lock("nobody").force_unlock().await.unwrap());
    assert_eq!(dbsize(&mut raw), 0);
}

#[tokio::test]
async fn awkward_names_work() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let long = "k".repeat(64 * 1024);
    let names = [
        "{braced}",
        "a{b}c",
        "}{",
        "quote\"s'",
        "with spaces",
        "锁🔒 ünïcödé",
        "new\nline",
        "redisson_lock__channel:{x}",
        long.as_str(),
    ];
    for name in names {
        let lock = mgr.lock(name);
        let guard = lock.acquire().await.unwrap();
        let field: Option<String> = raw.hget(name, lock.holder_id()).unwrap();
        assert_eq!(field.as_deref(), Some("1"), "{:.40}", name);
        // A waiter is woken on the channel of that exact name.
        let waiter = {
            let lock = mgr.lock(name);
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                let g = lock.acquire().await.unwrap();
                g.release().await.unwrap();
                started.elapsed()
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        guard.release().await.unwrap();
        let waited = waiter.await.unwrap();
        assert!(
            waited < Duration::from_secs(2),
            "{:.40}: woken by the message, {waited:?}",
            name
        );
        assert!(!lock.is_locked().await.unwrap());
    }
    assert_eq!(dbsize(&mut raw), 0);
}
