//! One name through several lock kinds in one manager. docs/protocol.md, "Non-reentrant locks":
//! an `RLock`, an `RFairLock` and their non-reentrant kinds on one name "exclude each other and
//! wake each other"; a fenced lock is "everything of the reentrant lock" plus its counter; and
//! "One name, one kind": the read-write lock refuses a hash without `mode` (and the others a
//! hash with one) with `WrongType`, writing nothing. Each kind has its own lock actor (and its
//! own local hand-off): these tests take one name through all of them in one `LockManager`,
//! where a mistake in how actors of one name share holders, counts or hand-offs would show.

mod support;

use std::time::{Duration, Instant};

use lockman::{Config, Lock, LockError, LockManager};
use redis::{AsyncCommands, Commands};
use support::RedisServer;

const WATCHDOG: Duration = Duration::from_millis(2000);

fn exclusive_kinds(mgr: &LockManager, name: &str) -> Vec<(&'static str, Lock)> {
    vec![
        ("reentrant", mgr.lock(name)),
        ("fenced", mgr.fenced_lock(name).into()),
        ("fair", mgr.fair_lock(name).into()),
        ("non_reentrant", mgr.non_reentrant_lock(name)),
        (
            "non_reentrant_fair",
            mgr.non_reentrant_fair_lock(name).into(),
        ),
    ]
}

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url()).watchdog_timeout(WATCHDOG))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_held_shuts_out_every_other_kind_of_the_same_manager() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    for (holding, lock) in exclusive_kinds(&mgr, "shared") {
        let guard = lock.acquire().await.unwrap();
        for (other, candidate) in exclusive_kinds(&mgr, "shared") {
            let got = candidate.try_acquire().await.unwrap();
            assert!(
                got.is_none(),
                "{other} got in while {holding} held the same name"
            );
        }
        let rw = mgr.read_write_lock("shared");
        for (side, attempt) in [
            ("read", rw.read().try_acquire().await.map(|g| g.is_some())),
            ("write", rw.write().try_acquire().await.map(|g| g.is_some())),
        ] {
            assert!(
                matches!(attempt, Err(LockError::WrongType { .. })),
                "{side} while {holding} held: {attempt:?}"
            );
        }
        let fields: std::collections::HashMap<String, String> = raw.hgetall("shared").unwrap();
        assert_eq!(
            fields,
            std::collections::HashMap::from([(lock.holder_id(), "1".to_owned())]),
            "while {holding} held"
        );
        guard.release().await.unwrap();
        assert!(!raw.exists::<_, bool>("shared").unwrap(), "{holding}");
    }
    mgr.shutdown().await;
}

/// Two tasks per kind, all in one manager on one name, each taking the lock 15 times with a
/// bounded wait and incrementing a counter in Redis non-atomically (GET, yield, SET) inside:
/// the counter is exact only if no two holds of any kinds ever overlapped. Fenced tokens keep
/// growing across the other kinds' holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_of_every_kind_on_one_name_never_overlap() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let conn = server.async_conn().await;
    let mut tasks = Vec::new();
    for round in 0..2 {
        for (kind, lock) in exclusive_kinds(&mgr, "mixed") {
            let mut conn = conn.clone();
            tasks.push(tokio::spawn(async move {
                let mut taken = 0u64;
                let mut last_token = 0u64;
                let deadline = Instant::now() + Duration::from_secs(60);
                while taken < 15 {
                    assert!(Instant::now() < deadline, "{kind} #{round}: starved");
                    let Some(g) = lock
                        .try_acquire_for(Duration::from_millis(300))
                        .await
                        .unwrap()
                    else {
                        continue;
                    };
                    if let Some(token) = g.token() {
                        assert!(
                            token > last_token,
                            "{kind}: token {token} after {last_token}"
                        );
                        last_token = token;
                    }
                    let n: u64 = conn
                        .get::<_, Option<u64>>("mixed:counter")
                        .await
                        .unwrap()
                        .unwrap_or(0);
                    tokio::task::yield_now().await;
                    let _: () = conn.set("mixed:counter", n + 1).await.unwrap();
                    g.release().await.unwrap();
                    taken += 1;
                }
                taken
            }));
        }
    }
    let mut taken = 0;
    for t in tasks {
        taken += t.await.unwrap();
    }
    let total: u64 = conn.clone().get("mixed:counter").await.unwrap();
    assert_eq!(total, taken, "holds overlapped");
    assert_eq!(taken, 150);
    let mut raw = server.conn();
    assert!(!raw.exists::<_, bool>("mixed").unwrap());
    let queue: i64 = raw.llen("redisson_lock_queue:{mixed}").unwrap();
    assert_eq!(queue, 0, "fair places left behind");
    mgr.shutdown().await;
}
