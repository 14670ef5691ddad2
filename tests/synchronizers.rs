//! Semaphores, permit semaphores and count-down latches against a real Redis: the exact Redis
//! state after each operation, waking across "languages" (the Java side is played by a raw
//! client following Redisson's wire semantics, `support/redisson.rs`), exclusion counted across
//! managers, renewal and loss of permits, and bad input.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockManager};
use redis::Commands;
use support::{RedisServer, redisson};

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url()))
        .await
        .expect("manager starts")
}

async fn manager_with_watchdog(server: &RedisServer, watchdog: Duration) -> LockManager {
    LockManager::start(Config::new(server.url()).watchdog_timeout(watchdog))
        .await
        .expect("manager starts")
}

fn get(raw: &mut redis::Connection, key: &str) -> Option<String> {
    raw.get(key).unwrap()
}

#[tokio::test]
async fn semaphore_layout_and_messages_are_redissons() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mut heard = support::commands::listen(server.conn(), "SUBSCRIBE", "redisson_sc:{sem}");
    let mgr = manager(&server).await;
    let sem = mgr.semaphore("sem");

    assert_eq!(sem.available().await.unwrap(), 0, "never set: none free");
    assert!(sem.try_set_permits(3).await.unwrap());
    assert_eq!(get(&mut raw, "sem").as_deref(), Some("3"));
    assert_eq!(support::commands::next_message(&mut heard)[2], "3");
    assert!(!sem.try_set_permits(5).await.unwrap(), "set only once");
    assert_eq!(get(&mut raw, "sem").as_deref(), Some("3"));

    let two = sem.acquire(2).await.unwrap();
    assert_eq!(get(&mut raw, "sem").as_deref(), Some("1"));
    assert!(sem.try_acquire(2).await.unwrap().is_none());
    assert_eq!(
        get(&mut raw, "sem").as_deref(),
        Some("1"),
        "a short attempt changes nothing"
    );
    two.release().await.unwrap();
    assert_eq!(get(&mut raw, "sem").as_deref(), Some("3"));
    assert_eq!(
        support::commands::next_message(&mut heard)[2],
        "3",
        "the new free count"
    );

    assert_eq!(sem.add_permits(2).await.unwrap(), 5);
    assert_eq!(support::commands::next_message(&mut heard)[2], "5");
    assert_eq!(sem.add_permits(-1).await.unwrap(), 4);
    assert_eq!(sem.drain().await.unwrap(), 4);
    assert_eq!(get(&mut raw, "sem").as_deref(), Some("0"));
    assert_eq!(sem.release(2).await.unwrap(), 2);
    assert_eq!(sem.available().await.unwrap(), 2);

    // A guard kept with forget leaves its permits taken, as Redisson's acquire does.
    sem.acquire(2).await.unwrap().forget();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(get(&mut raw, "sem").as_deref(), Some("0"));
    // No latch key is left beyond the lanes used, and they expire.
    let latches: Vec<String> = raw.keys("redisson_unlock_latch:{sem}:*").unwrap();
    assert!(latches.len() <= 2, "{latches:?}");
    for key in latches {
        let ttl: i64 = raw.pttl(&key).unwrap();
        assert!(ttl > 0, "{key} has no expiry");
    }
    mgr.shutdown().await;
}

#[tokio::test]
async fn a_java_release_wakes_a_lockman_waiter_and_the_reverse() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let sem = mgr.semaphore("shared");
    assert!(redisson::semaphore_try_set(&mut raw, "shared", 1));
    assert!(
        redisson::semaphore_try_acquire(&mut raw, "shared", 1),
        "Java holds the one permit"
    );

    let waiter = tokio::spawn({
        let sem = sem.clone();
        async move { sem.acquire(1).await }
    });
    assert!(
        support::wait::subscribed(&mut raw, "redisson_sc:{shared}", Duration::from_secs(5)).await
    );
    let started = Instant::now();
    redisson::semaphore_release(&mut raw, "shared", 1);
    let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by Java's message")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(get(&mut raw, "shared").as_deref(), Some("0"));

    // The reverse: a Java waiter listens on the channel and tries on each message.
    let mut java = support::commands::listen(server.conn(), "SUBSCRIBE", "redisson_sc:{shared}");
    assert!(!redisson::semaphore_try_acquire(&mut raw, "shared", 1));
    guard.release().await.unwrap();
    let message = support::commands::next_message(&mut java);
    assert_eq!(
        message[2], "1",
        "lockman publishes the new free count, as Java does"
    );
    assert!(redisson::semaphore_try_acquire(&mut raw, "shared", 1));
    mgr.shutdown().await;
}

#[tokio::test]
async fn a_java_permit_with_a_lease_expires_and_a_lockman_waiter_reclaims_it_without_a_message() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let sem = mgr.permit_semaphore("psem");
    assert!(sem.try_set_permits(1).await.unwrap());
    let java_id = [7u8; 16];
    // The clock is read before the Java permit's 600 ms lease starts: read after it, a loaded
    // machine's stall between the two shortened the wait measured below (not the real one).
    let started = Instant::now();
    assert!(redisson::permit_try_acquire(
        &mut raw,
        "psem",
        java_id,
        Some(600)
    ));
    assert_eq!(get(&mut raw, "psem").as_deref(), Some("0"));

    let guard = tokio::time::timeout(Duration::from_secs(5), sem.acquire(1))
        .await
        .expect("the expired permit was reclaimed in time")
        .unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(400),
        "took it after {waited:?}: before expiry"
    );
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    // Exact state: Java's id is gone, lockman's is there, 16 raw bytes, scored by the server's
    // clock plus the watchdog timeout (30 s by default).
    let held: Vec<(Vec<u8>, i64)> = raw.zrange_withscores("{psem}:timeout", 0, -1).unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].0.len(), 16);
    assert_ne!(held[0].0, java_id.to_vec());
    assert_eq!(guard.ids(), vec![support_hex(&held[0].0)]);
    let (secs, _): (i64, i64) = redis::cmd("TIME").query(&mut raw).unwrap();
    let left = held[0].1 - secs * 1000;
    assert!((25_000..=31_000).contains(&left), "expiry {left} ms away");
    assert_eq!(get(&mut raw, "psem").as_deref(), Some("0"));

    // Java releases an unknown id: nothing changes; lockman's release gives it back.
    assert_eq!(redisson::permit_release(&mut raw, "psem", java_id), 0);
    guard.release().await.unwrap();
    assert_eq!(get(&mut raw, "psem").as_deref(), Some("1"));
    assert_eq!(raw.zcard::<_, i64>("{psem}:timeout").unwrap(), 0);
    // And Java takes it after lockman, by its own script.
    assert!(redisson::permit_try_acquire(
        &mut raw, "psem", java_id, None
    ));
    assert_eq!(
        raw.zscore::<_, _, i64>("{psem}:timeout", &java_id[..])
            .unwrap(),
        redisson::NO_LEASE
    );
    assert!(
        sem.try_acquire(1).await.unwrap().is_none(),
        "Java's permit without a lease holds"
    );
    mgr.shutdown().await;
}

fn support_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn permits_without_a_lease_are_renewed_and_come_back_when_their_process_dies() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let watchdog = Duration::from_millis(900);
    let first = manager_with_watchdog(&server, watchdog).await;
    let sem = first.permit_semaphore("renewed");
    assert!(sem.try_set_permits(1).await.unwrap());
    let guard = sem.acquire(1).await.unwrap();
    tokio::time::sleep(watchdog * 3).await;
    assert!(!guard.is_lost(), "renewed past three watchdog timeouts");
    let second = manager_with_watchdog(&server, watchdog).await;
    let other = second.permit_semaphore("renewed");
    assert!(other.try_acquire(1).await.unwrap().is_none(), "still held");

    // The holder's process "dies": its manager stops without releasing.
    guard.forget();
    drop(sem);
    drop(first);
    let started = Instant::now();
    let taken = tokio::time::timeout(Duration::from_secs(5), other.acquire(1))
        .await
        .expect("the dead holder's permit came back")
        .unwrap();
    assert!(started.elapsed() <= watchdog * 3, "{:?}", started.elapsed());
    assert_eq!(raw.zcard::<_, i64>("{renewed}:timeout").unwrap(), 1);
    taken.release().await.unwrap();
    second.shutdown().await;
}

#[tokio::test]
async fn a_permit_reclaimed_by_another_client_is_reported_lost_and_its_release_says_so() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager_with_watchdog(&server, Duration::from_millis(600)).await;
    let sem = mgr.permit_semaphore("reclaimed");
    assert!(sem.try_set_permits(2).await.unwrap());
    let guard = sem.acquire(1).await.unwrap();
    // Another client takes it away (as a Java client whose clock runs far ahead would).
    let ids: Vec<Vec<u8>> = raw.zrange("{reclaimed}:timeout", 0, 0).unwrap();
    let _: () = raw.zrem("{reclaimed}:timeout", &ids[0][..]).unwrap();
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("renewal found it gone");
    assert!(guard.is_lost());
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotHeld { .. })
    ));
    assert_eq!(
        get(&mut raw, "reclaimed").as_deref(),
        Some("1"),
        "nothing given twice"
    );

    // A permit with a lease is reported lost when the lease ends.
    let leased = sem
        .acquire_with_lease(1, Duration::from_millis(300))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(3), leased.lost())
        .await
        .expect("the lease ended");
    mgr.shutdown().await;
}

#[tokio::test]
async fn a_latch_counts_down_from_both_sides_and_opens_waiters_on_both() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let latch = mgr.count_down_latch("ready");
    assert_eq!(latch.count().await.unwrap(), 0);
    assert!(
        latch.wait_for(Duration::from_millis(10)).await.unwrap(),
        "open when never set"
    );
    let mut java = support::commands::listen(
        server.conn(),
        "SUBSCRIBE",
        &redisson::latch_channel("ready"),
    );
    assert!(latch.try_set_count(2).await.unwrap());
    assert_eq!(
        support::commands::next_message(&mut java)[2],
        "1",
        "a new count"
    );
    assert!(!redisson::latch_try_set(&mut raw, "ready", 5), "set once");
    assert_eq!(get(&mut raw, "ready").as_deref(), Some("2"));

    let waiter = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait().await }
    });
    assert!(
        !latch.wait_for(Duration::from_millis(200)).await.unwrap(),
        "still closed"
    );
    redisson::latch_count_down(&mut raw, "ready");
    assert_eq!(latch.count().await.unwrap(), 1);
    assert_eq!(latch.count_down().await.unwrap(), 0);
    assert_eq!(get(&mut raw, "ready"), None, "deleted when open");
    assert_eq!(
        support::commands::next_message(&mut java)[2],
        "0",
        "Java's waiters open"
    );
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("lockman's waiter opened")
        .unwrap()
        .unwrap();
    assert_eq!(
        latch.count_down().await.unwrap(),
        0,
        "counting an open latch changes nothing"
    );
    assert_eq!(get(&mut raw, "ready"), None);

    // Set by Java, opened by lockman, awaited by lockman.
    assert!(redisson::latch_try_set(&mut raw, "ready", 1));
    let waiter = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait_for(Duration::from_secs(10)).await }
    });
    assert!(
        support::wait::subscribed(
            &mut raw,
            &redisson::latch_channel("ready"),
            Duration::from_secs(5)
        )
        .await
    );
    latch.count_down().await.unwrap();
    assert!(waiter.await.unwrap().unwrap());
    mgr.shutdown().await;
}

/// `tasks` tasks on each of `managers` managers, each taking one permit `rounds` times, count
/// how many are inside at once; returns (most inside at once, rounds done).
async fn contend(server: &RedisServer, permit: bool, permits: u32) -> (usize, usize) {
    let (managers, tasks, rounds) = (3, 6, 15);
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    let mut mgrs = Vec::new();
    for _ in 0..managers {
        let mgr = manager(server).await;
        for _ in 0..tasks {
            let (inside, most, done) = (inside.clone(), most.clone(), done.clone());
            let (plain, expiring) = (mgr.semaphore("pool"), mgr.permit_semaphore("ppool"));
            handles.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = if permit {
                        expiring.acquire(1).await.unwrap()
                    } else {
                        plain.acquire(1).await.unwrap()
                    };
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                    done.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        mgrs.push(mgr);
    }
    let setter = &mgrs[0];
    if permit {
        setter
            .permit_semaphore("ppool")
            .try_set_permits(permits)
            .await
            .unwrap();
    } else {
        setter
            .semaphore("pool")
            .try_set_permits(permits)
            .await
            .unwrap();
    }
    for h in handles {
        tokio::time::timeout(Duration::from_secs(60), h)
            .await
            .expect("nobody starves")
            .unwrap();
    }
    for m in mgrs {
        m.shutdown().await;
    }
    (most.load(Ordering::SeqCst), done.load(Ordering::SeqCst))
}

#[tokio::test]
async fn never_more_than_n_inside_counted_across_managers() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (most, done) = contend(&server, false, 3).await;
    assert!(most <= 3, "{most} inside a semaphore of 3");
    assert!(most >= 2, "the permits were shared: at most {most} at once");
    assert_eq!(done, 3 * 6 * 15);
    assert_eq!(
        get(&mut raw, "pool").as_deref(),
        Some("3"),
        "every permit came back"
    );
    let (most, done) = contend(&server, true, 3).await;
    assert!(most <= 3, "{most} inside a permit semaphore of 3");
    assert_eq!(done, 3 * 6 * 15);
    assert_eq!(get(&mut raw, "ppool").as_deref(), Some("3"));
    assert_eq!(raw.zcard::<_, i64>("{ppool}:timeout").unwrap(), 0);
}

#[tokio::test]
async fn a_release_of_k_permits_costs_about_k_attempts_with_many_local_waiters() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let sem = mgr.semaphore("herd");
    assert!(sem.try_set_permits(1).await.unwrap());
    let holder = sem.acquire(1).await.unwrap();
    let waiters: Vec<_> = (0..200)
        .map(|_| {
            let sem = sem.clone();
            tokio::spawn(async move { sem.acquire(1).await })
        })
        .collect();
    assert!(
        support::wait::subscribed(&mut raw, "redisson_sc:{herd}", Duration::from_secs(5)).await
    );
    // Every waiter's first attempt is done: no script runs for 200 ms.
    support::wait::quiet(&mut raw).await;
    holder.release().await.unwrap(); // frees 1: wakes 1
    support::wait::until("the release woke a waiter", || {
        waiters.iter().any(|w| w.is_finished())
    })
    .await;
    // A window for any further wake-up to show: there should be none.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls = support::commands::command_calls(&mut raw, "evalsha");
    // The release, one attempt of the woken waiter; nothing else while that one holds.
    assert!(
        calls <= 3,
        "{calls} script calls for a release of 1 permit with 200 waiters"
    );
    assert_eq!(waiters.iter().filter(|w| w.is_finished()).count(), 1);
    mgr.shutdown().await;
    for w in waiters {
        let _ = w.await;
    }
}

#[tokio::test]
async fn bad_input_gets_typed_errors_and_changes_nothing() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let sem = mgr.semaphore("bad");
    let invalid = |r: Result<_, LockError>| matches!(r, Err(LockError::InvalidArgument { .. }));
    assert!(invalid(sem.try_set_permits(0).await.map(|_| ())));
    assert!(invalid(sem.acquire(0).await.map(|_| ())));
    assert!(invalid(sem.add_permits(0).await.map(|_| ())));
    assert!(invalid(sem.release(0).await.map(|_| ())));
    assert!(invalid(mgr.semaphore("").available().await.map(|_| ())));
    let psem = mgr.permit_semaphore("bad");
    assert!(invalid(
        psem.acquire_with_lease(1, Duration::ZERO).await.map(|_| ())
    ));
    let latch = mgr.count_down_latch("bad");
    assert!(invalid(latch.try_set_count(0).await.map(|_| ())));
    assert_eq!(get(&mut raw, "bad"), None, "nothing was written");

    // A key of another type: WrongType, and the key is left as it was.
    let _: () = raw.hset("hash", "f", "v").unwrap();
    let wrong = |r: Result<_, LockError>| matches!(r, Err(LockError::WrongType { .. }));
    assert!(wrong(
        mgr.semaphore("hash").try_acquire(1).await.map(|_| ())
    ));
    assert!(wrong(
        mgr.semaphore("hash").try_set_permits(1).await.map(|_| ())
    ));
    assert!(wrong(mgr.semaphore("hash").available().await.map(|_| ())));
    assert!(wrong(
        mgr.permit_semaphore("hash")
            .try_acquire(1)
            .await
            .map(|_| ())
    ));
    assert!(wrong(
        mgr.count_down_latch("hash").count_down().await.map(|_| ())
    ));
    assert!(wrong(
        mgr.count_down_latch("hash")
            .wait_for(Duration::from_millis(50))
            .await
            .map(|_| ())
    ));
    let _: () = raw.set("text", "not a number").unwrap();
    assert!(wrong(
        mgr.semaphore("text").try_acquire(1).await.map(|_| ())
    ));
    assert_eq!(get(&mut raw, "text").as_deref(), Some("not a number"));
    let fields: Vec<(String, String)> = raw.hgetall("hash").unwrap();
    assert_eq!(fields, vec![("f".to_owned(), "v".to_owned())]);

    // Permits given back twice: the second is NotHeld, and the count is right.
    assert!(psem.try_set_permits(1).await.unwrap());
    let guard = psem.acquire(1).await.unwrap();
    let permits = guard.into_permits();
    let actor = permits.actor().clone();
    let ids: Vec<Vec<u8>> = raw.zrange("{bad}:timeout", 0, 0).unwrap();
    let _: () = raw.zrem("{bad}:timeout", &ids[0][..]).unwrap(); // released behind its back
    let reply = actor
        .send(lockman::actix::ReleasePermits(permits))
        .await
        .unwrap();
    assert!(matches!(reply, Err(LockError::NotHeld { .. })), "{reply:?}");
    assert_eq!(
        get(&mut raw, "bad").as_deref(),
        Some("0"),
        "an unknown permit adds nothing"
    );
    mgr.shutdown().await;
}

#[tokio::test]
async fn a_dropped_wait_leaks_no_permit_and_idle_actors_stop() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let sem = mgr.semaphore("drop");
    assert!(sem.try_set_permits(1).await.unwrap());
    let holder = sem.acquire(1).await.unwrap();
    for _ in 0..20 {
        let _ = sem
            .try_acquire_for(1, Duration::from_millis(5))
            .await
            .unwrap();
        let waiting = sem.acquire(1);
        let _ = tokio::time::timeout(Duration::from_millis(3), waiting).await;
    }
    holder.release().await.unwrap();
    assert!(
        support::wait::eventually(Duration::from_secs(3), || get(&mut raw, "drop").as_deref()
            == Some("1"))
        .await
    );
    assert!(
        support::wait::lock_actors_stop(&mgr, Duration::from_secs(3)).await,
        "idle actors stop"
    );
    mgr.shutdown().await;
}

#[tokio::test]
async fn permits_pass_between_local_waiters_without_redis_but_other_processes_get_their_turn() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let sem = a.semaphore("busy");
    assert!(sem.try_set_permits(1).await.unwrap());
    // Ten local tasks keep the one permit busy, passing it between them.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rounds = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let (sem, stop, rounds) = (sem.clone(), stop.clone(), rounds.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let guard = sem.acquire(1).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    rounds.fetch_add(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    // Counted over 50 rounds of the busy tasks, however long a loaded machine takes for them.
    support::wait::until("the tasks took turns", || {
        rounds.load(Ordering::SeqCst) >= 20
    })
    .await;
    support::commands::reset_stats(&mut raw);
    let before = rounds.load(Ordering::SeqCst);
    support::wait::until("50 more rounds", || {
        rounds.load(Ordering::SeqCst) >= before + 50
    })
    .await;
    let done = rounds.load(Ordering::SeqCst) - before;
    let calls = support::commands::command_calls(&mut raw, "evalsha");
    assert!(done > 20, "{done} rounds");
    assert!(
        (calls as usize) < done,
        "{calls} script calls for {done} rounds: most permits passed without Redis"
    );
    // Another process's waiter still gets in: every so many hand-offs, a release goes through
    // Redis and its message.
    let other = b.semaphore("busy");
    let started = Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(5), other.acquire(1))
        .await
        .expect("the other process got a turn")
        .unwrap();
    println!("the other process waited {:?}", started.elapsed());
    guard.release().await.unwrap();
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        get(&mut raw, "busy").as_deref(),
        Some("1"),
        "the permit came back"
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_latch_whose_key_vanished_without_a_message_opens_for_new_waiters_and_at_deadlines() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let latch = mgr.count_down_latch("vanish");
    assert!(latch.try_set_count(1).await.unwrap());
    let parked = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait_for(Duration::from_millis(800)).await }
    });
    assert!(
        support::wait::subscribed(
            &mut raw,
            &redisson::latch_channel("vanish"),
            Duration::from_secs(5)
        )
        .await
    );
    let _: () = raw.del("vanish").unwrap(); // as an expiry or a data loss would: no message
    let started = Instant::now();
    assert!(
        latch.wait_for(Duration::from_secs(5)).await.unwrap(),
        "a new waiter reads it"
    );
    // Not the parked waiter's 5 s deadline: a new waiter reads the count at once.
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(
        parked.await.unwrap().unwrap(),
        "the parked one reads it again at its deadline"
    );
    mgr.shutdown().await;
}
