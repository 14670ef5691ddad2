//! One acceptance suite that every exclusive lock kind runs (reentrant, fenced, fair, the write
//! side of a read-write lock, non-reentrant and non-reentrant fair): exclusion counted exactly,
//! bad input, lost-lock reporting, cancel safety. They share one core; this checks that each
//! kind really gets its behaviour.

mod support;

use std::time::Duration;

use lockman::{Config, Lock, LockError, LockManager};
use redis::AsyncCommands;
use support::{RedisServer, wait::lock_actors_stop};

const WATCHDOG: Duration = Duration::from_millis(600);

fn kinds(mgr: &LockManager, name: &str) -> Vec<(&'static str, Lock)> {
    let mut kinds = support::locks::exclusive_kinds(mgr, name);
    // The group multi-lock over one member: its own hash layout, so not in the shared list
    // (shared_name.rs runs kinds against each other on one name).
    let group = mgr
        .group_lock(name, ["member"])
        .expect("one member is valid");
    kinds.push(("group", group.into()));
    kinds
}

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url()).watchdog_timeout(WATCHDOG))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_excludes_exactly() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let conn = server.async_conn().await;
    for (kind, _) in kinds(&mgr, "x") {
        let name = format!("exclusive:{kind}");
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let lock = kinds(&mgr, &name)
                .into_iter()
                .find(|(k, _)| *k == kind)
                .unwrap()
                .1;
            let mut conn = conn.clone();
            let counter = format!("counter:{kind}");
            tasks.push(tokio::spawn(async move {
                for _ in 0..50 {
                    let g = lock.acquire().await.unwrap();
                    let n: u64 = conn
                        .get::<_, Option<u64>>(&counter)
                        .await
                        .unwrap()
                        .unwrap_or(0);
                    tokio::task::yield_now().await;
                    let _: () = conn.set(&counter, n + 1).await.unwrap();
                    g.release().await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let total: u64 = conn.clone().get(format!("counter:{kind}")).await.unwrap();
        assert_eq!(total, 200, "{kind}");
    }
}

#[tokio::test]
async fn every_kind_refuses_bad_input_and_wrong_types() {
    let server = RedisServer::start();
    let mut raw = server.async_conn().await;
    let _: () = raw.set("text", "keep").await.unwrap();
    let mgr = manager(&server).await;
    for (kind, lock) in kinds(&mgr, "") {
        assert!(
            matches!(lock.acquire().await, Err(LockError::InvalidArgument { .. })),
            "{kind}"
        );
    }
    for (kind, lock) in kinds(&mgr, "text") {
        let err = tokio::time::timeout(Duration::from_secs(2), lock.acquire())
            .await
            .unwrap()
            .unwrap_err();
        assert!(
            matches!(err, LockError::WrongType { .. }),
            "{kind}: {err:?}"
        );
        let lease = lock.acquire_with_lease(Duration::ZERO).await;
        assert!(
            matches!(lease, Err(LockError::InvalidArgument { .. })),
            "{kind}"
        );
    }
    let kept: String = raw.get("text").await.unwrap();
    assert_eq!(kept, "keep");
}

#[tokio::test]
async fn every_kind_reports_a_lost_lock() {
    let server = RedisServer::start();
    let mut raw = server.async_conn().await;
    let mgr = manager(&server).await;
    for (kind, lock) in kinds(&mgr, "lost") {
        let g = lock.acquire().await.unwrap();
        let _: () = raw.del("lost").await.unwrap();
        tokio::time::timeout(WATCHDOG, g.lost())
            .await
            .unwrap_or_else(|_| panic!("{kind} not reported lost"));
        // The lock actor has forgotten the hold: the release says so, for every kind.
        let released = g.release().await;
        assert!(
            matches!(released, Err(LockError::NotHeld { .. })),
            "{kind}: {released:?}"
        );
        let left: i64 = raw.exists("lost").await.unwrap();
        assert_eq!(left, 0, "{kind}");
    }
}

#[tokio::test]
async fn every_kind_refuses_to_release_a_deleted_lock() {
    // Released at once, before the watchdog's next renewal as a rule: the release script itself
    // finds no hold.
    let server = RedisServer::start();
    let mut raw = server.async_conn().await;
    let mgr = manager(&server).await;
    let mut all = kinds(&mgr, "deleted");
    all.push(("read", mgr.read_write_lock("deleted").read().into()));
    for (kind, lock) in all {
        let g = lock.acquire().await.unwrap();
        let _: () = raw.del("deleted").await.unwrap();
        let released = g.release().await;
        assert!(
            matches!(released, Err(LockError::NotHeld { .. })),
            "{kind}: {released:?}"
        );
        let left: i64 = raw.exists("deleted").await.unwrap();
        assert_eq!(left, 0, "{kind}");
    }
}

#[tokio::test]
async fn every_kind_cleans_up_a_cancelled_waiter() {
    let server = RedisServer::start();
    let mut raw = server.async_conn().await;
    let (holder_mgr, waiter_mgr) = (manager(&server).await, manager(&server).await);
    for ((kind, holder), (_, waiter)) in kinds(&holder_mgr, "cancel")
        .into_iter()
        .zip(kinds(&waiter_mgr, "cancel"))
    {
        let g = holder.acquire().await.unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(100), waiter.acquire())
                .await
                .is_err()
        );
        assert!(
            lock_actors_stop(&waiter_mgr, Duration::from_secs(1)).await,
            "{kind}: a waiter lingers"
        );
        g.release().await.unwrap();
        let exists: bool = raw.exists("cancel").await.unwrap();
        assert!(!exists, "{kind}: nobody took it for the cancelled waiter");
        let queue: u64 = raw.llen("redisson_lock_queue:{cancel}").await.unwrap();
        assert_eq!(queue, 0, "{kind}: left in the fair queue");
    }
}

/// A re-entry with a shorter lease never cuts its hold short: the outer guard was promised its
/// own lease (`valid_until`), and another process must not take the name before it ends.
/// (The break, found by a docs-only attack: the re-entry set the key's PTTL to its 300 ms, its
/// release restored 300 ms, and another client took the name while the outer guard's
/// `valid_until` was seconds ahead.)
#[tokio::test]
async fn every_reentrant_kind_keeps_the_longer_lease_of_a_reentry() {
    let server = RedisServer::start();
    let mut raw = server.async_conn().await;
    let mgr = manager(&server).await;
    let other = manager(&server).await;
    let (outer_lease, inner_lease) = (Duration::from_secs(3), Duration::from_millis(300));
    for (kind, lock) in kinds(&mgr, "nested") {
        if kind.starts_with("non-reentrant") {
            continue;
        }
        let outer = lock.acquire_with_lease(outer_lease).await.unwrap();
        let promised = outer.valid_until();
        let inner = lock.acquire_with_lease(inner_lease).await.unwrap();
        let pttl: i64 = raw.pttl("nested").await.unwrap();
        assert!(
            pttl > 2_000,
            "{kind}: the re-entry cut the PTTL to {pttl} ms"
        );
        inner.release().await.unwrap();
        let pttl: i64 = raw.pttl("nested").await.unwrap();
        assert!(pttl > 2_000, "{kind}: the release restored {pttl} ms");
        // Past the inner lease: the name is still the outer guard's, for every process.
        tokio::time::sleep(inner_lease * 2).await;
        let taken = kinds(&other, "nested")
            .into_iter()
            .find(|(k, _)| *k == kind)
            .unwrap()
            .1
            .try_acquire()
            .await
            .unwrap();
        assert!(taken.is_none(), "{kind}: taken inside the outer lease");
        assert!(!outer.is_lost(), "{kind}: the outer hold was told lost");
        assert!(
            outer.valid_until() >= promised,
            "{kind}: valid_until moved earlier"
        );
        outer.release().await.unwrap();
        let left: i64 = raw.exists("nested").await.unwrap();
        assert_eq!(left, 0, "{kind}");
    }
    mgr.shutdown().await;
    other.shutdown().await;
}

/// A lease hold re-entered without a lease is renewed by the watchdog until it is released
/// entirely (as `acquire_with_lease`'s doc says): past its own lease it is still held.
#[tokio::test]
async fn a_lease_hold_reentered_without_a_lease_is_renewed_until_released() {
    let server = RedisServer::start();
    let mut raw = server.async_conn().await;
    let mgr = manager(&server).await;
    let lock = mgr.lock("renewed");
    let lease = Duration::from_millis(400);
    let outer = lock.acquire_with_lease(lease).await.unwrap();
    let inner = lock.acquire().await.unwrap();
    inner.release().await.unwrap();
    // Past the lease and two watchdog timeouts: only renewals kept it.
    tokio::time::sleep(lease + WATCHDOG * 2).await;
    let pttl: i64 = raw.pttl("renewed").await.unwrap();
    assert!(pttl > 0, "renewed: PTTL {pttl}");
    assert!(!outer.is_lost());
    outer.release().await.unwrap();
    let left: i64 = raw.exists("renewed").await.unwrap();
    assert_eq!(left, 0);
    mgr.shutdown().await;
}
