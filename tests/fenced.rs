//! The fenced lock: tokens that grow with every acquisition, by any client.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockman::{Config, LockManager};
use redis::Commands;
use support::RedisServer;

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url()))
        .await
        .expect("manager starts")
}

/// The server's clock in microseconds, as `TIME` gives it.
fn server_micros(raw: &mut redis::Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(raw).unwrap();
    secs * 1_000_000 + micros
}

#[tokio::test]
async fn layout_is_the_reentrant_hash_plus_a_token_counter() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.fenced_lock("fence");
    let before = server_micros(&mut raw);
    let g1 = lock.acquire().await.unwrap();
    let after = server_micros(&mut raw);
    // A token is the counter raised to the server's clock in microseconds, plus one.
    assert!(
        (before + 1..=after + 1).contains(&g1.token()),
        "first token {} not from the clock ({before}..={after})",
        g1.token()
    );
    let g2 = lock.acquire().await.unwrap(); // re-entry gets a new, greater token
    assert!(g2.token() > g1.token());
    let t2 = g2.token();
    let count: String = raw.hget("fence", lock.holder_id()).unwrap();
    assert_eq!(count, "2");
    let counter: u64 = raw.get("redisson_lock_token:{fence}").unwrap();
    assert_eq!(counter, g2.token());
    g1.release().await.unwrap();
    g2.release().await.unwrap();
    assert!(!raw.exists::<_, bool>("fence").unwrap());
    assert_eq!(
        raw.get::<_, u64>("redisson_lock_token:{fence}").unwrap(),
        t2,
        "the counter stays"
    );
    // A failed attempt takes no token.
    let held = lock.acquire().await.unwrap();
    assert!(held.token() > t2);
    assert!(
        mgr.fenced_lock("fence")
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        raw.get::<_, u64>("redisson_lock_token:{fence}").unwrap(),
        held.token()
    );
}

/// The counter is the token source, shared with Redisson clients on the same name: a counter
/// ahead of the clock is only incremented, one behind it (a Redisson client's small counter,
/// or one a failover left behind) is raised to the clock first; either way the token is the
/// counter's new value.
#[tokio::test]
async fn the_counter_is_the_token_source_raised_to_the_clock_when_behind() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let ahead = server_micros(&mut raw) + 60_000_000_000;
    let _: () = raw.set("redisson_lock_token:{ahead}", ahead).unwrap();
    let guard = mgr.fenced_lock("ahead").acquire().await.unwrap();
    assert_eq!(guard.token(), ahead + 1);
    assert_eq!(
        raw.get::<_, u64>("redisson_lock_token:{ahead}").unwrap(),
        ahead + 1
    );
    guard.release().await.unwrap();

    let _: () = raw.set("redisson_lock_token:{behind}", 41).unwrap();
    let before = server_micros(&mut raw);
    let guard = mgr.fenced_lock("behind").acquire().await.unwrap();
    assert!(
        guard.token() > before,
        "{} not raised to the clock",
        guard.token()
    );
    assert_eq!(
        raw.get::<_, u64>("redisson_lock_token:{behind}").unwrap(),
        guard.token()
    );
    guard.release().await.unwrap();
}

/// A restart that lost the server's data (no persistence) loses the counter with it; the next
/// series starts from the clock, above every token handed out before, so storage that refuses
/// older tokens keeps accepting the new holders.
#[tokio::test]
async fn tokens_keep_increasing_after_a_restart_that_lost_the_data() {
    let mut server = RedisServer::start();
    let mgr = manager(&server).await;
    let lock = mgr.fenced_lock("durable");
    let mut last = 0;
    for _ in 0..3 {
        let guard = lock.acquire().await.unwrap();
        assert!(guard.token() > last);
        last = guard.token();
        guard.release().await.unwrap();
    }
    server.restart(); // empty: the counter is gone
    let mut raw = server.conn();
    assert!(
        !raw.exists::<_, bool>("redisson_lock_token:{durable}")
            .unwrap()
    );
    let mut after = None;
    for _ in 0..100 {
        match lock.try_acquire_for(Duration::from_secs(1)).await {
            Ok(Some(guard)) => {
                after = Some(guard.token());
                guard.release().await.unwrap();
                break;
            }
            // The manager reconnects after the restart.
            Ok(None) | Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let after = after.expect("acquired after the restart");
    assert!(
        after > last,
        "token went backwards across the data loss: {last} then {after}"
    );
    mgr.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_strictly_increase_over_1000_acquisitions_by_8_tasks_in_2_managers() {
    let server = RedisServer::start();
    let (a, b) = (manager(&server).await, manager(&server).await);
    // Pushed inside the critical section: the order of this list is the order of acquisition.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for t in 0..8 {
        let lock = if t % 2 == 0 { &a } else { &b }.fenced_lock("tokens");
        let seen = seen.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..125 {
                let guard = lock.acquire().await.unwrap();
                seen.lock().unwrap().push(guard.token());
                tokio::task::yield_now().await;
                guard.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1000);
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "tokens out of order");
}

/// Storage that refuses a write whose token is below the highest it has seen.
const FENCED_WRITE: &str = r"
local seen = tonumber(redis.call('hget', KEYS[1], 'token') or '0')
if tonumber(ARGV[1]) < seen then return 0 end
redis.call('hset', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return 1";

#[tokio::test]
async fn storage_refuses_a_stale_holders_write() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let write = redis::Script::new(FENCED_WRITE);
    let mut store = |token: u64, value: &str| -> bool {
        write
            .key("record")
            .arg(token)
            .arg(value)
            .invoke::<i64>(&mut raw)
            .unwrap()
            == 1
    };
    let slow = mgr
        .fenced_lock("record-lock")
        .acquire_with_lease(Duration::from_millis(100))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await; // a pause past the lease
    let fast = mgr.fenced_lock("record-lock").acquire().await.unwrap();
    assert!(fast.token() > slow.token());
    assert!(store(fast.token(), "new"));
    assert!(
        !store(slow.token(), "stale"),
        "the stale holder's write is refused"
    );
    let value: String = server.conn().hget("record", "value").unwrap();
    assert_eq!(value, "new");
}

/// A re-entry takes a new token; every guard of the one hold still writes, with the hold's
/// newest token: the outer guard is not stale while its hold lives. A later holder's write
/// fences them all out.
#[tokio::test]
async fn every_guard_of_a_reentrant_hold_writes_with_the_holds_newest_token() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.fenced_lock("doc");
    let outer = lock.acquire().await.unwrap();
    let inner = lock.clone().acquire().await.unwrap();
    assert!(
        inner.token() > outer.token(),
        "a re-entry takes a new token"
    );
    assert!(inner.fenced_set("{doc}:body", "inner").await.unwrap());
    assert_eq!(outer.fence_token(), inner.token());
    assert!(
        outer.fenced_set("{doc}:body", "outer").await.unwrap(),
        "the outer guard of a live hold is refused"
    );
    assert_eq!(raw.get::<_, String>("{doc}:body").unwrap(), "outer");
    inner.release().await.unwrap();
    assert!(outer.fenced_set("{doc}:body", "outer again").await.unwrap());
    let fence: u64 = raw.hget("lockman_fence:{doc}", "{doc}:body").unwrap();
    assert_eq!(fence, outer.fence_token());
    outer.release().await.unwrap();

    // The next hold (another holder) writes; a guard of it is never helped by the old hold's
    // tokens, and the old hold's tokens are below its own.
    let next = mgr.fenced_lock("doc").acquire().await.unwrap();
    assert_eq!(next.fence_token(), next.token());
    assert!(next.token() > fence);
    assert!(next.fenced_set("{doc}:body", "next").await.unwrap());
    next.release().await.unwrap();
    mgr.shutdown().await;
}

/// The error rows of a fenced write: a fence hash of the wrong type is Redis's `WRONGTYPE`
/// (nothing written), and the write is refused, not applied, whatever the target holds.
#[tokio::test]
async fn a_fence_of_the_wrong_type_is_an_error_and_writes_nothing() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let guard = mgr.fenced_lock("typed").acquire().await.unwrap();
    let _: () = raw.set("lockman_fence:{typed}", "not a hash").unwrap();
    let err = guard
        .fenced_set("{typed}:out", "value")
        .await
        .expect_err("a fence that is not a hash");
    assert!(
        err.to_string().contains("WRONGTYPE")
            || matches!(err, lockman::LockError::WrongType { .. }),
        "{err:?}"
    );
    assert!(!err.is_retryable(), "{err:?}");
    assert_eq!(
        raw.exists::<_, bool>("{typed}:out"),
        Ok(false),
        "nothing written"
    );
    let fence: String = raw.get("lockman_fence:{typed}").unwrap();
    assert_eq!(fence, "not a hash", "the fence left as it was");
    // Once the fence is a hash again, the same guard writes.
    let _: () = raw.del("lockman_fence:{typed}").unwrap();
    assert!(guard.fenced_set("{typed}:out", "value").await.unwrap());
    assert_eq!(raw.get::<_, String>("{typed}:out").unwrap(), "value");
    guard.release().await.unwrap();
}

/// Under `Config::name_prefix` the fence is the mapped name's (`lockman_fence:{app1:f}`), beside
/// its token counter, and it fences as without a prefix: the newer holder's write wins, the
/// stale one is refused and changes nothing.
#[tokio::test]
async fn fenced_writes_under_a_name_prefix_use_the_mapped_names_fence() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let prefixed = || Config::new(server.url()).name_prefix("app1:");
    let (m1, m2) = (
        LockManager::start(prefixed()).await.unwrap(),
        LockManager::start(prefixed()).await.unwrap(),
    );
    let old = m1.fenced_lock("f").acquire().await.unwrap();
    assert!(old.fenced_set("{app1:f}:out", "old").await.unwrap());
    let seen: Option<u64> = raw.hget("lockman_fence:{app1:f}", "{app1:f}:out").unwrap();
    assert_eq!(seen, Some(old.token()), "the mapped name's fence");
    let counter: u64 = raw.get("redisson_lock_token:{app1:f}").unwrap();
    assert_eq!(counter, old.token());
    // No key of the unmapped name.
    let stray: Vec<String> = raw.keys("*{f}*").unwrap();
    assert!(stray.is_empty(), "{stray:?}");
    // The old holder's key goes (a pause past its TTL), and another takes the name.
    let _: () = raw.del("app1:f").unwrap();
    let new = m2.fenced_lock("f").acquire().await.unwrap();
    assert!(new.token() > old.token());
    assert!(new.fenced_set("{app1:f}:out", "new").await.unwrap());
    assert!(
        !old.fenced_set("{app1:f}:out", "stale").await.unwrap(),
        "the stale holder's write is refused"
    );
    assert_eq!(raw.get::<_, String>("{app1:f}:out").unwrap(), "new");
    let seen: u64 = raw.hget("lockman_fence:{app1:f}", "{app1:f}:out").unwrap();
    assert_eq!(seen, new.token());
    new.release().await.unwrap();
}
