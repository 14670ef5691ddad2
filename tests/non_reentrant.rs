//! The non-reentrant lock and non-reentrant fair lock (Redisson 4.4's `RedissonNonReentrantLock`
//! and `RedissonNonReentrantFairLock`) against a real Redis: a second acquire by the holder is
//! `LockError::AlreadyHeld` and changes nothing in Redis; the keys and channels are RLock's and
//! RFairLock's; the Java side, played by `support::redisson`, is refused its own re-entry with
//! `NON_REENTRANT_REACQUIRE` and excludes / wakes lockman like any holder (docs/protocol.md,
//! "Non-reentrant locks").

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockKind, LockManager};
use redis::Commands;
use support::redisson::{self as java, prefix_name};
use support::{RedisServer, commands::listen, commands::next_message, wait::subscribed};

const JAVA: &str = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0:7";

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url()))
        .await
        .expect("manager starts")
}

fn hash(raw: &mut redis::Connection, key: &str) -> HashMap<String, String> {
    raw.hgetall(key).unwrap()
}

fn already_held<T: std::fmt::Debug>(res: Result<T, LockError>, name: &str) {
    match res {
        Err(LockError::AlreadyHeld { name: n }) => assert_eq!(n, name),
        other => panic!("expected AlreadyHeld for {name}: {other:?}"),
    }
}

/// Both kinds: the first acquire takes the lock (count 1, RLock's / RFairLock's keys); every
/// re-entry by the holder (try once, wait, with a lease, through a clone) is AlreadyHeld at once,
/// leaving the hash, its PTTL and the fair queue as they were; another holder is kept out; the
/// release frees the lock and publishes as RLock's does.
#[tokio::test]
async fn a_reentry_is_already_held_and_changes_nothing() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    for fair in [false, true] {
        let name = if fair { "nrf" } else { "nr" };
        let lock = if fair {
            (*mgr.non_reentrant_fair_lock(name)).clone()
        } else {
            mgr.non_reentrant_lock(name)
        };
        let kind = if fair {
            LockKind::NonReentrantFair
        } else {
            LockKind::NonReentrant
        };
        assert_eq!(lock.kind(), kind);
        assert!(kind.is_non_reentrant());
        let guard = lock.acquire().await.unwrap();
        let taken = HashMap::from([(lock.holder_id(), "1".to_owned())]);
        assert_eq!(hash(&mut raw, name), taken);
        let pttl: i64 = raw.pttl(name).unwrap();
        assert!(pttl > 25_000, "watchdog lease: {pttl}");

        let started = Instant::now();
        already_held(lock.try_acquire().await, name);
        already_held(lock.clone().acquire().await, name);
        already_held(lock.try_acquire_for(Duration::from_secs(30)).await, name);
        already_held(
            lock.acquire_with_lease(Duration::from_millis(500)).await,
            name,
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "refused at once, not after a wait: {:?}",
            started.elapsed()
        );
        assert_eq!(hash(&mut raw, name), taken, "the count stays 1");
        let after: i64 = raw.pttl(name).unwrap();
        assert!(
            after > 25_000 && after <= pttl,
            "the lease was not touched: {after} after {pttl}"
        );
        if fair {
            let queue: Vec<String> = raw
                .lrange(prefix_name("redisson_lock_queue", name), 0, -1)
                .unwrap();
            assert!(queue.is_empty(), "a refused re-entry does not queue");
        }
        // Another holder is kept out, as by any lock.
        let other = if fair {
            (*mgr.non_reentrant_fair_lock(name)).clone()
        } else {
            mgr.non_reentrant_lock(name)
        };
        assert!(other.try_acquire().await.unwrap().is_none());

        let channel = prefix_name("redisson_lock__channel", name);
        let mut heard = listen(server.conn(), "SUBSCRIBE", &channel);
        guard.release().await.unwrap();
        assert!(!raw.exists::<_, bool>(name).unwrap());
        if !fair {
            assert_eq!(next_message(&mut heard), ["message", &channel, "0"]);
        }
        // Free again: the holder takes it anew.
        let again = lock.acquire().await.unwrap();
        assert_eq!(hash(&mut raw, name), taken);
        again.release().await.unwrap();
    }
    mgr.shutdown().await;
}

/// lockman's script replies exactly Redisson's error to a re-entry: run raw, on a hash the holder
/// holds.
#[test]
fn the_reentry_reply_is_redissons_error() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let _: () = raw.hset("raw", "me:1", 1).unwrap();
    let err = redis::Script::new(include_str!("../src/protocol/nonreentrant_acquire.lua"))
        .key("raw")
        .arg(30_000)
        .arg("me:1")
        .arg(1) // the holder's count it expects: it holds, so this is a re-entry
        .invoke::<redis::Value>(&mut raw)
        .unwrap_err();
    // Redis 7 sends a script error without a code as `ERR <text>`, for Redisson's script too.
    assert!(err.to_string().contains("NON_REENTRANT_REACQUIRE"), "{err}");
    assert_eq!(
        hash(&mut raw, "raw"),
        HashMap::from([("me:1".into(), "1".into())])
    );
}

/// Java holds a name (Redisson's non-reentrant lock): Java's own re-entry is refused; lockman's
/// non-reentrant acquire waits like any other holder and is woken by Java's unlock. The other way
/// round, Java's tryLock on a name lockman holds gets the PTTL (it waits), and a Java re-entry
/// with lockman's holder as its lockName gets NON_REENTRANT_REACQUIRE, changing nothing.
#[tokio::test]
async fn java_and_lockman_exclude_and_wake_each_other() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;

    assert_eq!(
        java::non_reentrant_try_lock(&mut raw, "jn", JAVA, 30_000),
        Ok(None)
    );
    assert!(matches!(
        java::non_reentrant_try_lock(&mut raw, "jn", JAVA, 30_000),
        Err(e) if e.contains("NON_REENTRANT_REACQUIRE")
    ));
    assert_eq!(
        hash(&mut raw, "jn"),
        HashMap::from([(JAVA.into(), "1".into())])
    );
    let lock = mgr.non_reentrant_lock("jn");
    assert!(
        lock.try_acquire_for(Duration::from_millis(300))
            .await
            .unwrap()
            .is_none()
    );
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { lock.try_acquire_for(Duration::from_secs(20)).await }
    });
    let mut probe = server.conn();
    assert!(
        subscribed(
            &mut probe,
            &prefix_name("redisson_lock__channel", "jn"),
            Duration::from_secs(5)
        )
        .await
    );
    let freed = Instant::now();
    assert_eq!(java::lock_unlock(&mut raw, "jn", JAVA, 30_000), Some(1));
    let guard = waiting
        .await
        .unwrap()
        .unwrap()
        .expect("woken by Java's unlock");
    assert!(
        freed.elapsed() < Duration::from_secs(3),
        "{:?}",
        freed.elapsed()
    );
    let holder = lock.holder_id();
    assert_eq!(
        hash(&mut raw, "jn"),
        HashMap::from([(holder.clone(), "1".into())])
    );

    let ttl = java::non_reentrant_try_lock(&mut raw, "jn", JAVA, 30_000).unwrap();
    assert!(ttl.is_some_and(|t| t > 0), "Java waits: {ttl:?}");
    assert!(matches!(
        java::non_reentrant_try_lock(&mut raw, "jn", &holder, 30_000),
        Err(e) if e.contains("NON_REENTRANT_REACQUIRE")
    ));
    assert_eq!(hash(&mut raw, "jn"), HashMap::from([(holder, "1".into())]));
    guard.release().await.unwrap();
    mgr.shutdown().await;
}

/// The fair kind: a Java non-reentrant fair holder refuses its own re-entry; a lockman
/// non-reentrant fair waiter queues behind it in RFairLock's queue and is woken on its own
/// channel by Java's fair unlock.
#[tokio::test]
async fn the_fair_kind_queues_behind_java_and_is_woken_on_its_channel() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let name = "jf";
    assert_eq!(
        java::non_reentrant_fair_try_lock(&mut raw, name, JAVA, 30_000, 10_000),
        Ok(None)
    );
    assert!(matches!(
        java::non_reentrant_fair_try_lock(&mut raw, name, JAVA, 30_000, 10_000),
        Err(e) if e.contains("NON_REENTRANT_REACQUIRE")
    ));
    let lock = mgr.non_reentrant_fair_lock(name);
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { lock.try_acquire_for(Duration::from_secs(30)).await }
    });
    let own = format!(
        "{}:{}",
        prefix_name("redisson_lock__channel", name),
        lock.holder_id()
    );
    let mut probe = server.conn();
    assert!(subscribed(&mut probe, &own, Duration::from_secs(5)).await);
    let queue: Vec<String> = raw
        .lrange(prefix_name("redisson_lock_queue", name), 0, -1)
        .unwrap();
    assert_eq!(queue, vec![lock.holder_id()]);
    let freed = Instant::now();
    assert_eq!(java::fair_unlock(&mut raw, name, JAVA, 30_000), Some(1));
    let guard = waiting
        .await
        .unwrap()
        .unwrap()
        .expect("woken on its channel");
    assert!(
        freed.elapsed() < Duration::from_secs(3),
        "{:?}",
        freed.elapsed()
    );
    assert_eq!(
        hash(&mut raw, name),
        HashMap::from([(lock.holder_id(), "1".into())])
    );
    already_held(lock.try_acquire().await, name);
    // Java's re-entry with lockman's holder as its lockName is refused too.
    assert!(matches!(
        java::non_reentrant_fair_try_lock(&mut raw, name, &lock.holder_id(), 30_000, 10_000),
        Err(e) if e.contains("NON_REENTRANT_REACQUIRE")
    ));
    guard.release().await.unwrap();
    assert!(!raw.exists::<_, bool>(name).unwrap());
    mgr.shutdown().await;
}

/// Both kinds under contention, counted exactly: three tasks in each of two managers (two client
/// ids), each with its own handle, take the name again and again. Inside, the holder's re-entry
/// (a clone's single try) is refused every time, leaving its count at 1 and, for the fair kind,
/// no place of it in the queue; the counter misses no round; nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_kinds_exclude_across_managers_and_refuse_the_holder_inside() {
    use redis::AsyncCommands;
    const TASKS: u64 = 3;
    const ROUNDS: u64 = 25;
    let server = RedisServer::start();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let conn = server.async_conn().await;
    for fair in [false, true] {
        let name = if fair { "crowd:fair" } else { "crowd" };
        let counter = format!("{name}:counter");
        let queue = prefix_name("redisson_lock_queue", name);
        let mut tasks = Vec::new();
        for mgr in [&a, &b] {
            for _ in 0..TASKS {
                let lock = if fair {
                    (*mgr.non_reentrant_fair_lock(name)).clone()
                } else {
                    mgr.non_reentrant_lock(name)
                };
                let (mut conn, counter, queue) = (conn.clone(), counter.clone(), queue.clone());
                tasks.push(tokio::spawn(async move {
                    for _ in 0..ROUNDS {
                        let guard = lock.acquire().await.unwrap();
                        let n: u64 = conn
                            .get::<_, Option<u64>>(&counter)
                            .await
                            .unwrap()
                            .unwrap_or(0);
                        already_held(lock.clone().try_acquire().await, name);
                        let count: Option<String> =
                            conn.hget(name, lock.holder_id()).await.unwrap();
                        assert_eq!(
                            count.as_deref(),
                            Some("1"),
                            "a refused re-entry counts nothing"
                        );
                        let place: Option<u64> = redis::cmd("LPOS")
                            .arg(&queue)
                            .arg(lock.holder_id())
                            .query_async(&mut conn)
                            .await
                            .unwrap();
                        assert_eq!(place, None, "a refused re-entry does not queue");
                        tokio::task::yield_now().await;
                        let _: () = conn.set(&counter, n + 1).await.unwrap();
                        guard.release().await.unwrap();
                    }
                }));
            }
        }
        for t in tasks {
            t.await.unwrap();
        }
        let mut raw = conn.clone();
        let total: u64 = raw.get(&counter).await.unwrap();
        assert_eq!(
            total,
            2 * TASKS * ROUNDS,
            "fair {fair}: a round lost to an overlap"
        );
        let left: bool = raw.exists(name).await.unwrap();
        assert!(!left, "fair {fair}: the lock left behind");
        let queued: u64 = raw.llen(&queue).await.unwrap();
        assert_eq!(queued, 0, "fair {fair}: places left in the queue");
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// A caller that gives up while its attempt waits in Redis (paused), then asks again at once with
/// the same handle: the first attempt's grant reaches nobody and is released, and the second
/// request is not refused as holding the lock already; it takes the lock after that release.
/// (The dropped grant's release used to come behind the second attempt, which Redis then
/// refused with `NON_REENTRANT_REACQUIRE`: a spurious `AlreadyHeld` from a holder with no guard.)
/// Also under a name prefix: the release nobody asked for goes to the prefixed keys, or the
/// hold it leaves refuses the second request.
#[tokio::test]
async fn a_grant_whose_caller_went_never_refuses_the_next_acquire_of_its_holder() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    for prefix in ["", "app1:"] {
        let mgr = LockManager::start(Config::new(server.url()).name_prefix(prefix))
            .await
            .expect("manager starts");
        let key = format!("{prefix}went");
        for (kind, lock) in [
            ("non-reentrant", mgr.non_reentrant_lock("went")),
            (
                "non-reentrant fair",
                mgr.non_reentrant_fair_lock("went").into(),
            ),
        ] {
            let kind = format!("{kind}, prefix {prefix:?}");
            support::commands::load_scripts(&lock).await;
            // Frozen until the caller has gone, resumed by the test: the request runs only then,
            // after its caller went. (A 1 s stall begun before it: a loaded machine could send it
            // after the stall, and it was answered.)
            server.pause(support::FROZEN).expect("pause the server");
            let first = tokio::time::timeout(Duration::from_millis(300), lock.acquire()).await;
            assert!(
                first.is_err(),
                "{kind}: answered through the pause: {first:?}"
            );
            // The second request goes out while the first's grant still waits in Redis, the
            // case this test is about. (On a loaded machine it may go out only after the resume:
            // the test then passes without that case, but never fails for the load.)
            let second = tokio::spawn({
                let lock = lock.clone();
                async move { lock.try_acquire_for(Duration::from_secs(10)).await }
            });
            tokio::time::sleep(Duration::from_millis(500)).await;
            server.resume().expect("resume the server");
            let second = second.await.unwrap();
            let guard = second
                .unwrap_or_else(|e| panic!("{kind}: {e:?}"))
                .unwrap_or_else(|| panic!("{kind}: free once the grant nobody took is released"));
            assert_eq!(
                hash(&mut raw, &key),
                HashMap::from([(lock.holder_id(), "1".to_owned())]),
                "{kind}"
            );
            guard.release().await.unwrap();
            // No hash, fair queue or timeout set of the name is left.
            let left: Vec<String> = raw.keys("*went*").unwrap();
            assert!(left.is_empty(), "{kind}: left in Redis: {left:?}");
        }
        mgr.shutdown().await;
    }
}
