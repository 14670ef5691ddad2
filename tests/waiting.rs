//! Waiting: driven by the unlock message and the holder's TTL, one waiter woken per message,
//! bounded waits that end on time, and cancellation that leaks neither waiters nor holds.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockman::{Config, LockManager};
use redis::Commands;
use support::{
    RedisServer, commands::command_calls, commands::load_scripts, commands::reset_stats, wait,
    wait::eventually, wait::lock_actors_stop,
};

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url()))
        .await
        .expect("manager starts")
}

/// A manager without the watch on its holds, for tests that count the scripts a wait costs:
/// the watch checks each hold that lives 20 ms (`held.lua`, one EVALSHA), and on a slow machine
/// holds meant to last less live longer. `loss.rs` counts the watch's own calls.
async fn unwatched(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url()).watch_holds(false))
        .await
        .expect("manager starts")
}

#[tokio::test]
async fn waiter_gets_an_expired_lease_lock_right_after_its_ttl() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let waiter_mgr = manager(&server).await;
    let lease = Duration::from_millis(600);
    // The holder is another client's hold as Redisson writes it, with a 600 ms lease: nobody
    // will release it or publish. (A lockman holder settles its lease's end itself, which on a
    // loaded machine can reach Redis just before Redis's own expiry and publish: then a
    // message, not the TTL, would wake the waiter.)
    let t0 = Instant::now();
    redis::pipe()
        .atomic()
        .hset("lease", "another-client:1", 1)
        .pexpire("lease", lease.as_millis() as i64)
        .exec(&mut raw)
        .unwrap();
    let t1 = Instant::now();
    reset_stats(&mut raw);

    let guard = waiter_mgr.lock("lease").acquire().await.unwrap();
    let got = Instant::now();
    assert!(
        got >= t0 + lease,
        "acquired {:?} before the lease ran out",
        t0 + lease - got
    );
    // A waiter that never retries would wait for good (`acquire`); one that waited for a
    // message would too (nobody publishes). 500 ms leaves a loaded machine room.
    let late = got.saturating_duration_since(t1 + lease);
    assert!(
        late <= Duration::from_millis(500),
        "acquired {late:?} after the TTL ran out"
    );
    assert_eq!(
        command_calls(&mut raw, "publish"),
        0,
        "nobody published: the TTL woke the waiter"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn try_acquire_for_gives_up_after_about_the_wait() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let _held = mgr.lock("busy").acquire().await.unwrap();
    for wait in [Duration::from_millis(100), Duration::from_millis(400)] {
        let started = Instant::now();
        let got = mgr.lock("busy").try_acquire_for(wait).await.unwrap();
        let took = started.elapsed();
        assert!(got.is_none());
        assert!(took >= wait, "gave up early: {took:?} < {wait:?}");
        // Left to anything but its own deadline it would wait for the holder's 30 s lease:
        // 250 ms over leaves a loaded machine room.
        assert!(
            took <= wait + Duration::from_millis(250),
            "gave up late: {took:?} for {wait:?}"
        );
    }
}

#[tokio::test]
async fn try_acquire_for_gets_the_lock_when_released_within_the_wait() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let held = mgr.lock("soon").acquire().await.unwrap();
    let waiter = mgr.lock("soon");
    let task = tokio::spawn(async move {
        let started = Instant::now();
        let got = waiter
            .try_acquire_for(Duration::from_secs(5))
            .await
            .unwrap();
        (got.is_some(), started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.unwrap();
    let (got, took) = task.await.unwrap();
    assert!(got);
    assert!(
        took < Duration::from_secs(1),
        "woken by the release, not the 30 s TTL: {took:?}"
    );
}

#[tokio::test]
async fn one_unlock_message_wakes_one_local_waiter() {
    const WAITERS: usize = 20;
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (holder_mgr, waiter_mgr) = (unwatched(&server).await, unwatched(&server).await);
    let held = holder_mgr.lock("hot").acquire().await.unwrap();

    let acquired = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    reset_stats(&mut raw);
    for _ in 0..WAITERS {
        let (lock, acquired) = (waiter_mgr.lock("hot"), acquired.clone());
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire().await.unwrap();
            acquired.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(5)).await;
            guard.release().await.unwrap();
        }));
    }
    // The first waiter has made its first attempt and the post-subscribe one; the others
    // queued behind it (or tried too); then nothing runs: every waiter is parked.
    wait::calls_reach(&mut raw, "evalsha", 2).await;
    wait::quiet(&mut raw).await;
    assert_eq!(acquired.load(Ordering::SeqCst), 0);

    held.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(acquired.load(Ordering::SeqCst), WAITERS);
    let evalsha = command_calls(&mut raw, "evalsha");
    let published = command_calls(&mut raw, "publish");
    // The holder's release publishes once. After that the waiters are local to one manager:
    // each release hands the lock to the next in the same script, without a publish, except
    // that a streak of hand-offs ends with a release that publishes (so that other processes
    // get their turn), and the last release publishes.
    let streak = lockman::MAX_HAND_OFF_STREAK as usize;
    let streak_ends = (WAITERS - 1) / (streak + 1);
    assert_eq!(
        published,
        1 + streak_ends as u64 + 1,
        "one unlock message per streak of hand-offs"
    );
    // The holder's release; one release or hand-off per waiter; an acquire for the first waiter
    // and after each streak's end. Waking every waiter at each message would cost about
    // WAITERS²/2 attempts instead.
    let ideal = (1 + WAITERS + 1 + streak_ends) as u64;
    assert!(
        evalsha <= ideal + 4,
        "{evalsha} script calls for {WAITERS} hand-offs (ideal {ideal})"
    );
    assert!(
        eventually(Duration::from_secs(2), || raw.exists::<_, bool>("hot")
            == Ok(false))
        .await
    );
}

#[tokio::test]
async fn a_new_request_queues_behind_local_waiters_without_a_round_trip() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (holder_mgr, waiter_mgr) = (unwatched(&server).await, unwatched(&server).await);
    load_scripts(&holder_mgr.lock("warm")).await;
    let held = holder_mgr.lock("q").acquire().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let waiter = |who: usize, lock: lockman::Lock| {
        let order = order.clone();
        tokio::spawn(async move {
            let guard = lock.acquire().await.unwrap();
            order.lock().unwrap().push(who);
            guard.release().await.unwrap();
        })
    };
    // The second waiter's handle knows its lock actor already (one attempt, before the counts
    // start), so its request is in the actor's mailbox from its task's first poll on.
    let second_lock = waiter_mgr.lock("q");
    assert!(second_lock.try_acquire().await.unwrap().is_none());
    reset_stats(&mut raw);
    let first = waiter(1, waiter_mgr.lock("q"));
    // Its attempts (the first, and the one once subscribed) are done: it waits.
    wait::calls_reach(&mut raw, "evalsha", 2).await;
    wait::quiet(&mut raw).await;
    let second = waiter(2, second_lock);
    // Its task runs before this one goes on (one thread): its request is sent, ahead of the
    // unlock message that the release below brings the same actor. Then a window for an
    // attempt it should not make.
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        command_calls(&mut raw, "evalsha"),
        0,
        "the second waiter made an attempt that could only fail"
    );

    held.release().await.unwrap();
    first.await.unwrap();
    second.await.unwrap();
    assert_eq!(*order.lock().unwrap(), [1, 2]);
    // The holder's release, the first waiter's acquire, its release that hands the lock to the
    // second (one script), and the second's release: nothing wasted.
    assert_eq!(command_calls(&mut raw, "evalsha"), 4);
    assert!(!raw.exists::<_, bool>("q").unwrap());
}

#[tokio::test]
async fn local_waiters_take_turns_in_arrival_order() {
    const WAITERS: usize = 5;
    const ROUNDS: usize = 4;
    let server = RedisServer::start();
    let (holder_mgr, waiter_mgr) = (manager(&server).await, manager(&server).await);
    let held = holder_mgr.lock("turns").acquire().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    // Each handle knows its lock actor already (one attempt each), so each task's request is
    // in the actor's mailbox from its first poll on: arrival order is spawn order.
    let mut locks = Vec::new();
    for _ in 0..WAITERS {
        let lock = waiter_mgr.lock("turns");
        assert!(lock.try_acquire().await.unwrap().is_none());
        locks.push(lock);
    }
    let mut tasks = Vec::new();
    for (who, lock) in locks.into_iter().enumerate() {
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                // Released and asked for again at once: it goes to the back of the queue rather
                // than barging ahead of the others.
                let guard = lock.acquire().await.unwrap();
                order.lock().unwrap().push(who);
                guard.release().await.unwrap();
            }
        }));
        // Its task runs before this one goes on (one thread): it has asked before the next.
        tokio::task::yield_now().await;
    }
    held.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let expected: Vec<usize> = (0..ROUNDS).flat_map(|_| 0..WAITERS).collect();
    assert_eq!(*order.lock().unwrap(), expected);
}

#[tokio::test]
async fn a_holder_re_enters_at_once_while_others_wait() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.lock("re");
    let outer = lock.acquire().await.unwrap();
    let other = mgr.lock("re");
    let waiting = tokio::spawn(async move { other.acquire().await.unwrap().release().await });
    // The other holder waits here (its lock actor subscribed for it).
    assert!(
        support::wait::subscribed(
            &mut raw,
            "redisson_lock__channel:{re}",
            Duration::from_secs(5)
        )
        .await
    );
    let inner = tokio::time::timeout(Duration::from_secs(2), lock.acquire())
        .await
        .expect("re-entering waited behind the other waiter")
        .unwrap();
    let field = lock.holder_id();
    assert_eq!(raw.hget::<_, _, u32>("re", &field).unwrap(), 2);
    inner.release().await.unwrap();
    assert!(!waiting.is_finished(), "the lock is still held once");
    outer.release().await.unwrap();
    waiting.await.unwrap().unwrap();
    assert!(!raw.exists::<_, bool>("re").unwrap());
}

#[tokio::test]
async fn dropping_a_waiting_acquire_removes_the_waiter() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (holder_mgr, waiter_mgr) = (manager(&server).await, manager(&server).await);
    let held = holder_mgr.lock("w").acquire().await.unwrap();
    let waiter = waiter_mgr.lock("w");
    let attempt = tokio::time::timeout(Duration::from_millis(200), waiter.acquire()).await;
    assert!(
        attempt.is_err(),
        "still waiting when the timeout dropped it"
    );
    let live = waiter_mgr.clone();
    let idle = lock_actors_stop(&live, Duration::from_millis(1000)).await;
    assert!(
        idle,
        "the waiter's lock actor stopped once its only waiter left"
    );
    held.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let exists: bool = raw.exists("w").unwrap();
    assert!(
        !exists,
        "nobody took the lock on behalf of the dropped waiter"
    );
}

#[tokio::test]
async fn a_grant_that_arrives_after_the_caller_left_is_released() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.lock("orphan");
    load_scripts(&lock).await;
    reset_stats(&mut raw);
    // Freeze the server so that the acquire is in flight when its caller gives up; resumed only
    // once it has. (A 0.4 s stall begun before the request: a loaded machine sent it late enough
    // for the grant to come back within the caller's 100 ms.)
    server.pause(support::FROZEN).expect("pause the server");
    let gave_up = tokio::time::timeout(Duration::from_millis(100), lock.try_acquire()).await;
    assert!(gave_up.is_err(), "the caller left while Redis was frozen");
    server.resume().expect("resume the server");
    assert!(
        eventually(Duration::from_secs(2), || raw.exists::<_, bool>("orphan")
            == Ok(false))
        .await
    );
    // Redis granted it (one acquire) and lockman released it (one release, one message).
    assert!(
        eventually(Duration::from_secs(2), || command_calls(
            &mut raw, "publish"
        ) == 1)
        .await
    );
    assert_eq!(command_calls(&mut raw, "evalsha"), 2);
    let idle = lock_actors_stop(&mgr, Duration::from_millis(1000)).await;
    assert!(idle, "no actor lingers");
    assert!(
        lock.try_acquire().await.unwrap().is_some(),
        "the lock is free"
    );
}

#[tokio::test]
async fn random_cancellation_under_contention_leaks_nothing() {
    const ROUNDS: u64 = 40;
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let granted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let (lock, granted) = (mgr.lock("churn"), granted.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                // Deadlines from 0 to 6 ms: some drop while queued, some during the round trip.
                // The last round waits as long as it takes: on a loaded machine every deadline
                // can end before its round trip, and the churn must still end in grants.
                let limit = Duration::from_micros((t * 7_919 + round * 104_729) % 6_000);
                let got = if round == ROUNDS - 1 {
                    Ok(lock.acquire().await)
                } else {
                    tokio::time::timeout(limit, lock.acquire()).await
                };
                if let Ok(Ok(guard)) = got {
                    granted.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    guard.release().await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        eventually(Duration::from_secs(3), || raw.exists::<_, bool>("churn")
            == Ok(false))
        .await,
        "a hold leaked: {:?}",
        raw.hgetall::<_, Vec<String>>("churn")
    );
    let idle = lock_actors_stop(&mgr, Duration::from_millis(3000)).await;
    assert!(idle, "a waiter leaked");
    // Each task's last round at least: the churn left the lock to be taken.
    assert!(granted.load(Ordering::SeqCst) >= 8);
}

#[tokio::test]
async fn a_waiter_arriving_as_another_leaves_is_still_woken_by_message() {
    let server = RedisServer::start();
    let (holder_mgr, waiter_mgr) = (manager(&server).await, manager(&server).await);
    for round in 0..20 {
        let held = holder_mgr.lock("churned").acquire().await.unwrap();
        // The first waiter gives up (its unsubscribe goes out) just as the next one subscribes.
        let leaving = waiter_mgr
            .lock("churned")
            .try_acquire_for(Duration::from_millis(30))
            .await;
        assert!(leaving.unwrap().is_none());
        let next = {
            let lock = waiter_mgr.lock("churned");
            tokio::spawn(async move { lock.acquire().await.unwrap().release().await.unwrap() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let released = Instant::now();
        held.release().await.unwrap();
        tokio::time::timeout(Duration::from_secs(2), next)
            .await
            .unwrap_or_else(|_| panic!("round {round}: not woken by the unlock message"))
            .unwrap();
        // Not woken, it would wait for the holder's 30 s lease.
        assert!(
            released.elapsed() < Duration::from_millis(1_500),
            "round {round}"
        );
    }
}

#[tokio::test]
async fn a_zero_wait_is_one_whole_attempt_even_when_redis_is_slow() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let lock = mgr.lock("zero");
    load_scripts(&lock).await;
    // The attempt takes ~200 ms: a zero wait does not cut it short (it is `Wait::No`).
    let stall = server.stall(0.2);
    let guard = lock.try_acquire_for(Duration::ZERO).await.unwrap();
    stall.join().unwrap();
    guard.expect("free, so taken").release().await.unwrap();
}

/// A manager's first acquire waits for its client record's first write (so that `lockman ls`
/// names the process from its first hold on), and that write is one round trip: the record's
/// script is loaded at start with the others, so no `SCRIPT LOAD` stands between the start and
/// the first grant (a NOSCRIPT miss, the load and the call again made it three round trips,
/// up to the 250 ms bound of `FIRST_RECORD_WAIT` on a distant server). Counted, not timed.
/// Breaks it: the record's script left out of the start's loads (one `SCRIPT LOAD` counted),
/// or the first grant not waiting for the record (no record when it returns).
#[tokio::test]
async fn the_first_acquire_waits_one_round_trip_for_the_client_record() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = unwatched(&server).await;
    reset_stats(&mut raw);
    let guard = mgr.lock("first").acquire().await.unwrap();
    let records: Vec<String> = raw.keys("lockman_client:*-*").unwrap();
    assert_eq!(
        records.len(),
        1,
        "the record is there at the first grant: {records:?}"
    );
    assert_eq!(
        command_calls(&mut raw, "script|load"),
        0,
        "no script loaded"
    );
    assert_eq!(
        command_calls(&mut raw, "evalsha"),
        2,
        "the record's write, then the acquire"
    );
    guard.release().await.unwrap();
    mgr.shutdown().await;
}
