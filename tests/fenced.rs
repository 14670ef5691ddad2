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

#[tokio::test]
async fn layout_is_the_reentrant_hash_plus_a_token_counter() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.fenced_lock("fence");
    let g1 = lock.acquire().await.unwrap();
    assert_eq!(g1.token(), 1);
    let g2 = lock.acquire().await.unwrap(); // re-entry gets a new, greater token
    assert_eq!(g2.token(), 2);
    let count: String = raw.hget("fence", lock.holder_id()).unwrap();
    assert_eq!(count, "2");
    let counter: u64 = raw.get("redisson_lock_token:{fence}").unwrap();
    assert_eq!(counter, 2);
    g1.release().await.unwrap();
    g2.release().await.unwrap();
    assert!(!raw.exists::<_, bool>("fence").unwrap());
    assert_eq!(
        raw.get::<_, u64>("redisson_lock_token:{fence}").unwrap(),
        2,
        "the counter stays"
    );
    // A failed attempt takes no token.
    let _held = lock.acquire().await.unwrap();
    assert!(
        mgr.fenced_lock("fence")
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(raw.get::<_, u64>("redisson_lock_token:{fence}").unwrap(), 3);
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
    assert_eq!(seen.last(), Some(&1000));
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
