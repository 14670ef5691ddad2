//! Mutual exclusion, counted exactly: tasks of one manager, two managers (two client ids), and a
//! holder process that crashes.

mod support;

use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockManager};
use redis::AsyncCommands;
use support::RedisServer;

/// Rounds on the counter `counter`: see `support::locks::count_rounds`.
async fn count_rounds(lock: lockman::Lock, redis: redis::aio::MultiplexedConnection, rounds: u32) {
    support::locks::count_rounds(lock, redis, "counter", rounds).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_tasks_times_a_hundred_rounds_count_exactly_1600() {
    let server = RedisServer::start();
    let mgr = LockManager::start(Config::new(server.url())).await.unwrap();
    let conn = server.async_conn().await;
    let tasks: Vec<_> = (0..16)
        .map(|_| tokio::spawn(count_rounds(mgr.lock("counted"), conn.clone(), 100)))
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let total: u64 = conn.clone().get("counter").await.unwrap();
    assert_eq!(total, 1600);
    let exists: bool = conn.clone().exists("counted").await.unwrap();
    assert!(!exists);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_managers_exclude_each_other() {
    let server = RedisServer::start();
    let a = LockManager::start(Config::new(server.url())).await.unwrap();
    let b = LockManager::start(Config::new(server.url())).await.unwrap();
    assert_ne!(a.client_id(), b.client_id());
    let conn = server.async_conn().await;
    let mut tasks = Vec::new();
    for mgr in [&a, &b] {
        for _ in 0..4 {
            tasks.push(tokio::spawn(count_rounds(
                mgr.lock("shared"),
                conn.clone(),
                50,
            )));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total: u64 = conn.clone().get("counter").await.unwrap();
    assert_eq!(total, 400);
}

const CHILD_URL: &str = "LOCKMAN_TEST_CHILD_URL";
const CHILD_WATCHDOG: Duration = Duration::from_millis(1500);

/// Not a test of its own: the body of the child process that `holder_crash_frees_the_lock`
/// starts (and kills). Run only with `--ignored` and the URL in the environment.
#[tokio::test]
#[ignore = "child process of holder_crash_frees_the_lock"]
async fn child_holds_the_lock_until_killed() {
    let url = std::env::var(CHILD_URL).expect("run by holder_crash_frees_the_lock");
    let config = Config::new(url).watchdog_timeout(CHILD_WATCHDOG);
    let mgr = LockManager::start(config).await.unwrap();
    let lock = mgr.lock("crash");
    let _guard = lock.acquire().await.unwrap();
    println!("HELD {}", lock.holder_id());
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[tokio::test]
async fn holder_crash_frees_the_lock_within_the_watchdog_timeout() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (mut child, holder) = support::child::spawn_child_test(
        "child_holds_the_lock_until_killed",
        (CHILD_URL, &server.url()),
        "HELD ",
    );
    // Held past two watchdog timeouts: the child's watchdog renews it.
    std::thread::sleep(CHILD_WATCHDOG * 2);
    let count: Option<String> = redis::Commands::hget(&mut raw, "crash", &holder).unwrap();
    assert_eq!(
        count.as_deref(),
        Some("1"),
        "the child still holds the lock"
    );

    let mgr = LockManager::start(Config::new(server.url())).await.unwrap();
    let lock = mgr.lock("crash");
    assert!(lock.try_acquire().await.unwrap().is_none());
    // The lease's time left read after the clock: the name opens no sooner than that. (A
    // fixed half timeout assumed the child's last renewal on schedule; a child starved on a
    // loaded machine renews late, leaving less, and the bound failed with nothing wrong.)
    let killed = Instant::now();
    let left: i64 = redis::Commands::pttl(&mut raw, "crash").unwrap();
    assert!(left > 0, "the child's hold ran out before the kill: {left}");
    child.kill().unwrap(); // SIGKILL: no release, no goodbye
    child.wait().unwrap();
    let guard = lock.acquire().await.unwrap();
    let took = killed.elapsed();
    assert!(
        took <= CHILD_WATCHDOG + Duration::from_secs(1),
        "took {took:?}"
    );
    assert!(
        took + Duration::from_millis(5) >= Duration::from_millis(left as u64),
        "the dead holder's lease still had {left} ms left: taken after {took:?}"
    );
    guard.release().await.unwrap();
}

/// One handle holds a lock twice, once by the watchdog and once with a lease, and releases the
/// inner hold: the outer one must still exclude everyone else. Whoever tracks the holder's
/// count must know both holds; one that knew only the lease hold would take Redis's extra count
/// for the residue of a lost reply and release it, deleting the key under a live guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_lease_hold_released_leaves_the_outer_hold_exclusive() {
    let server = RedisServer::start();
    let a = LockManager::start(Config::new(server.url())).await.unwrap();
    let b = LockManager::start(Config::new(server.url())).await.unwrap();
    let mut raw = server.async_conn().await;
    let lock = a.lock("nested");
    let outer = lock.acquire().await.unwrap();
    let inner = lock
        .acquire_with_lease(Duration::from_secs(10))
        .await
        .unwrap();
    let count: u32 = raw.hget("nested", lock.holder_id()).await.unwrap();
    assert_eq!(count, 2);
    inner.release().await.unwrap();
    // Long enough for any background settling to have run (its first retry is at 50 ms).
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let count: Option<u32> = raw.hget("nested", lock.holder_id()).await.unwrap();
        assert_eq!(count, Some(1), "the outer hold is still counted");
        assert!(b.lock("nested").try_acquire().await.unwrap().is_none());
    }
    assert!(!outer.is_lost());
    outer.release().await.unwrap();
    let exists: bool = raw.exists("nested").await.unwrap();
    assert!(!exists);
    assert!(b.lock("nested").try_acquire().await.unwrap().is_some());
}

/// A hold whose key is deleted behind its holder's back (a force unlock, a failover that lost
/// it), entered again by the same holder before a renewal noticed: Redis now counts one new
/// hold. The old hold is told lost, and its release must not take the new one back (it would
/// delete the key under a live guard, and let another manager in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_lost_unnoticed_then_entered_again_is_not_taken_back_by_the_old_release() {
    let server = RedisServer::start();
    let a = LockManager::start(Config::new(server.url())).await.unwrap();
    let b = LockManager::start(Config::new(server.url())).await.unwrap();
    let mut raw = server.async_conn().await;
    let lock = a.lock("again");
    let old = lock.acquire().await.unwrap();
    // The watchdog's next renewal is 10 s away (a 30 s timeout): nobody has noticed yet.
    let _: () = raw.del("again").await.unwrap();
    let new = lock.try_acquire().await.unwrap().expect("free in Redis");
    let count: u32 = raw.hget("again", lock.holder_id()).await.unwrap();
    assert_eq!(count, 1);
    assert!(
        old.is_lost(),
        "the old hold is known gone once the re-entry found it so"
    );
    let released = old.release().await;
    assert!(
        matches!(released, Err(LockError::NotHeld { .. })),
        "{released:?}"
    );
    let count: Option<u32> = raw.hget("again", lock.holder_id()).await.unwrap();
    assert_eq!(count, Some(1), "the new hold is still counted");
    assert!(b.lock("again").try_acquire().await.unwrap().is_none());
    assert!(!new.is_lost());
    new.release().await.unwrap();
    let exists: bool = raw.exists("again").await.unwrap();
    assert!(!exists);
}

/// Clones of one handle (one holder) mix watchdog and lease holds, nested, at once, while two
/// holders of another manager take the same name. Clones of one holder may be inside together;
/// two holders never. Each side marks itself inside (INCR) before it looks for the other, so of
/// two overlapping holds at least one sees the other: every overlap is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_mixing_lease_and_watchdog_holds_exclude_other_holders() {
    let server = RedisServer::start();
    let a = LockManager::start(Config::new(server.url())).await.unwrap();
    let b = LockManager::start(Config::new(server.url())).await.unwrap();
    let conn = server.async_conn().await;
    let lease = Duration::from_secs(10);
    let lock = a.lock("mixed");
    let mut tasks = Vec::new();
    for i in 0..4u32 {
        let (lock, mut conn) = (lock.clone(), conn.clone());
        tasks.push(tokio::spawn(async move {
            let mut overlaps = 0u32;
            for round in 0..25u32 {
                let outer = if (round + i) % 2 == 0 {
                    lock.acquire().await.unwrap()
                } else {
                    lock.acquire_with_lease(lease).await.unwrap()
                };
                let inner = lock.acquire_with_lease(lease).await.unwrap();
                inner.release().await.unwrap();
                let _: i64 = conn.incr("in:a", 1).await.unwrap();
                let others: i64 = conn
                    .get::<_, Option<i64>>("in:b")
                    .await
                    .unwrap()
                    .unwrap_or(0);
                overlaps += u32::from(others != 0);
                tokio::task::yield_now().await;
                let _: i64 = conn.decr("in:a", 1).await.unwrap();
                assert!(!outer.is_lost());
                outer.release().await.unwrap();
            }
            overlaps
        }));
    }
    for _ in 0..2 {
        let (lock, mut conn) = (b.lock("mixed"), conn.clone());
        tasks.push(tokio::spawn(async move {
            let mut overlaps = 0u32;
            for _ in 0..25 {
                let guard = lock.acquire().await.unwrap();
                let mine: i64 = conn.incr("in:b", 1).await.unwrap();
                let others: i64 = conn
                    .get::<_, Option<i64>>("in:a")
                    .await
                    .unwrap()
                    .unwrap_or(0);
                overlaps += u32::from(others != 0 || mine != 1);
                tokio::task::yield_now().await;
                let _: i64 = conn.decr("in:b", 1).await.unwrap();
                guard.release().await.unwrap();
            }
            overlaps
        }));
    }
    let mut overlaps = 0;
    for t in tasks {
        overlaps += t.await.unwrap();
    }
    assert_eq!(overlaps, 0, "holds of two holders overlapped");
    let exists: bool = conn.clone().exists("mixed").await.unwrap();
    assert!(!exists, "nothing left behind");
}

/// Two clones of one handle (one holder) ask at once for a free lock, with and without a lease:
/// the second is a re-entry of the first's hold and is granted as soon as the first is, not
/// after its wait runs out; Redis then counts two holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_asking_at_once_are_both_granted_at_once() {
    let server = RedisServer::start();
    let manager = LockManager::start(Config::new(server.url())).await.unwrap();
    let mut raw = server.async_conn().await;
    for round in 0..20u32 {
        let lock = manager.lock("clones");
        let clone = lock.clone();
        let wait = Duration::from_secs(3);
        let started = std::time::Instant::now();
        let (a, b) = tokio::join!(
            lock.try_acquire_for(wait),
            clone.try_acquire_with_lease(wait, Duration::from_secs(10))
        );
        let took = started.elapsed();
        let (a, b) = (a.unwrap(), b.unwrap());
        assert!(a.is_some() && b.is_some(), "round {round}: both granted");
        assert!(
            took < Duration::from_secs(1),
            "round {round}: took {took:?}"
        );
        let count: u32 = raw.hget("clones", lock.holder_id()).await.unwrap();
        assert_eq!(count, 2, "round {round}");
        a.unwrap().release().await.unwrap();
        b.unwrap().release().await.unwrap();
        let exists: bool = raw.exists("clones").await.unwrap();
        assert!(!exists, "round {round}");
    }
}
