//! The suite's shared lock workloads and checks: the exclusive kinds one promise runs through,
//! the counter rounds that come out short without exclusion, an unacknowledged replica sync.

use std::time::{Duration, Instant};

/// Each round: lock → read the counter `key` → yield → write counter + 1 → unlock. Without
/// exclusion, rounds overwrite each other and the total comes out short.
pub async fn count_rounds(
    lock: lockman::Lock,
    mut conn: redis::aio::MultiplexedConnection,
    key: &str,
    rounds: u32,
) {
    use redis::AsyncCommands;
    for _ in 0..rounds {
        let guard = lock.acquire().await.expect("acquire");
        let n: u64 = conn
            .get::<_, Option<u64>>(key)
            .await
            .expect("GET")
            .unwrap_or(0);
        tokio::task::yield_now().await;
        let _: () = conn.set(key, n + 1).await.expect("SET");
        guard.release().await.expect("release");
    }
}

/// Every exclusive lock kind on `name`, labelled: reentrant, fenced, fair, the write side of a
/// read-write lock, non-reentrant, non-reentrant fair and spin (the suites that run one promise
/// through each kind).
pub fn exclusive_kinds(
    mgr: &lockman::LockManager,
    name: &str,
) -> Vec<(&'static str, lockman::Lock)> {
    vec![
        ("reentrant", mgr.lock(name)),
        ("fenced", mgr.fenced_lock(name).into()),
        ("fair", mgr.fair_lock(name).into()),
        ("write", mgr.read_write_lock(name).write().into()),
        ("non-reentrant", mgr.non_reentrant_lock(name)),
        (
            "non-reentrant fair",
            mgr.non_reentrant_fair_lock(name).into(),
        ),
        ("spin", mgr.spin_lock(name)),
    ]
}

/// Checks a replica-synced acquire that no replica acknowledged: `ReplicaSync { acked: 0,
/// wanted: 1 }`, within two seconds of `started` (the sync timeout, not the response timeout).
pub fn assert_unacknowledged(err: &lockman::LockError, started: Instant) {
    assert!(
        matches!(
            err,
            lockman::LockError::ReplicaSync {
                acked: 0,
                wanted: 1
            }
        ),
        "{err:?}"
    );
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "{took:?}");
}
