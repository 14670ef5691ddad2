//! The fair lock's leaked places (issue 36), each reproduced on a real server: a place in the
//! Redis queue that no waiter of this process uses or leaves, a free lock whose live head is
//! never tried, deadlines skewed behind a holder's clones. Lost replies are lost for real (the
//! server paused with `CLIENT PAUSE` past the response time-out), dead waiters are child
//! processes killed with SIGKILL, and the Java side is played from Redisson's fair-lock wire
//! rules (`support::redisson`). Each test reads the queue (`redisson_lock_queue:{name}`) and the
//! deadlines (`redisson_lock_timeout:{name}`) as Redis has them.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockManager};
use redis::Commands;
use support::fair::{deadlines, epoch_ms, queue};
use support::{RedisServer, redisson, wait::eventually};

async fn manager(config: Config) -> LockManager {
    LockManager::start(config).await.expect("manager starts")
}

/// `holder`'s deadline in `d`.
fn at(d: &[(String, i64)], holder: &str) -> i64 {
    d.iter()
        .find(|(h, _)| h == holder)
        .map(|(_, at)| *at)
        .unwrap_or_else(|| panic!("{holder} has no deadline: {d:?}"))
}

/// Waits until the queue of `name` is `want`, at most `limit`; panics with what it is.
async fn queue_becomes(server: &RedisServer, name: &str, want: &[String], limit: Duration) {
    let mut raw = server.conn();
    let ok = eventually(limit, || queue(&mut raw, name) == want).await;
    assert!(
        ok,
        "queue of {name}: want {want:?}, got {:?} (deadlines {:?})",
        queue(&mut raw, name),
        deadlines(&mut raw, name)
    );
}

/// Leak 3: two waiters of one manager, `older` and `younger` (different handles), queued behind
/// a holder of another manager whose lease runs out (no release: nobody is woken by a message).
/// `older`'s place is lost (removed from Redis, as a failover or a prune would), so it queues
/// again behind `younger`, now the head. When the lease runs out the lock is free with a live
/// head: the retry must try `younger` too, not only the manager's oldest waiter, which is not
/// the head (the old code left the lock free until `younger`'s 300 s place expired).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_lock_goes_to_its_live_head_though_it_is_not_the_oldest_local_waiter() {
    const NAME: &str = "leak3";
    const LEASE: Duration = Duration::from_secs(4);
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (h, m) = (
        manager(Config::new(server.url())).await,
        manager(Config::new(server.url())).await,
    );
    let lease_start = Instant::now();
    let _held = h.fair_lock(NAME).acquire_with_lease(LEASE).await.unwrap();
    // The lock is free from about here on (the lease was given after `lease_start`).
    let free = lease_start + LEASE;
    let (older, younger) = (m.fair_lock(NAME), m.fair_lock(NAME));
    let (o, y) = (older.holder_id(), younger.holder_id());
    let wait_older = tokio::spawn({
        let l = older.clone();
        async move { l.acquire().await }
    });
    queue_becomes(
        &server,
        NAME,
        std::slice::from_ref(&o),
        Duration::from_secs(5),
    )
    .await;
    let wait_younger = tokio::spawn({
        let l = younger.clone();
        async move { l.acquire().await }
    });
    queue_becomes(
        &server,
        NAME,
        &[o.clone(), y.clone()],
        Duration::from_secs(5),
    )
    .await;
    // The older waiter's place is lost.
    let _: () = redis::pipe()
        .atomic()
        .lrem(format!("redisson_lock_queue:{{{NAME}}}"), 0, &o)
        .zrem(format!("redisson_lock_timeout:{{{NAME}}}"), &o)
        .query(&mut raw)
        .unwrap();
    // It queues again, behind the younger one, at its next attempt: a refresh of the places
    // (every place timeout / 3), else its retry when the lease has about run out, when the
    // younger one may be served at once (then the queue is never seen so).
    let requeued = eventually(Duration::from_secs(6), || {
        queue(&mut raw, NAME) == [y.clone(), o.clone()] || wait_younger.is_finished()
    })
    .await;
    assert!(
        requeued,
        "queue {:?}, deadlines {:?}",
        queue(&mut raw, NAME),
        deadlines(&mut raw, NAME)
    );
    let g = tokio::time::timeout_at((free + Duration::from_secs(4)).into(), wait_younger)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the free lock's live head was not served within 4 s: queue {:?}, deadlines \
                 (ms from now) {:?}",
                queue(&mut server.conn(), NAME),
                deadlines(&mut server.conn(), NAME)
                    .into_iter()
                    .map(|(h, d)| (h, d - epoch_ms()))
                    .collect::<Vec<_>>()
            )
        })
        .unwrap()
        .expect("the head acquired");
    let took = Instant::now().saturating_duration_since(free);
    assert!(
        Instant::now() >= free - Duration::from_millis(50),
        "not before the lease ran out"
    );
    assert_eq!(g.holder_id(), y);
    assert_eq!(queue(&mut raw, NAME), vec![o.clone()]);
    g.release().await.unwrap();
    let g = support::wait::woken(wait_older, Duration::from_secs(3)).await;
    assert!(queue(&mut raw, NAME).is_empty() && deadlines(&mut raw, NAME).is_empty());
    g.release().await.unwrap();
    assert!(took < Duration::from_secs(4), "{took:?}");
}

/// Leak 2: two clones of one handle (one holder); the first waits (queued), the second makes a
/// single try, sent while the server is paused, so it is under way when the first one's wait
/// runs out. The first waiter is then not its holder's last (no leave yet); the single try ends
/// busy, the holder's last waiter: it must leave the holder's place, though it queued nothing
/// itself (the old code left the place in the queue until its deadline, 31.5 s ahead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_try_of_a_clone_leaves_the_place_its_twin_queued() {
    const NAME: &str = "leak2";
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (x, m) = (
        manager(Config::new(server.url())).await,
        manager(Config::new(server.url()).response_timeout(Duration::from_secs(5))).await,
    );
    let held = x.fair_lock(NAME).acquire().await.unwrap(); // 30 s watchdog lease
    let lock = m.fair_lock(NAME);
    let twin = lock.clone();
    let id = lock.holder_id();
    assert_eq!(twin.holder_id(), id);
    let started = Instant::now();
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { lock.try_acquire_for(Duration::from_millis(1_500)).await }
    });
    queue_becomes(
        &server,
        NAME,
        std::slice::from_ref(&id),
        Duration::from_secs(1),
    )
    .await;
    let d = deadlines(&mut raw, NAME);
    assert_eq!(d.len(), 1, "{d:?}");
    // Paused from about 0.5 s to 2.1 s: the wait (1.5 s) runs out meanwhile.
    tokio::time::sleep(Duration::from_millis(500).saturating_sub(started.elapsed())).await;
    let stall = server.stall(1.6);
    let single = tokio::spawn(async move { twin.try_acquire().await });
    // The wait ran out while Redis did not answer: it says so (issue 57; was `Ok(None)`).
    let gave_up = waiting.await.unwrap();
    assert!(
        matches!(gave_up, Err(lockman::LockError::Unavailable { .. })),
        "{gave_up:?}"
    );
    assert!(single.await.unwrap().unwrap().is_none(), "the lock is held");
    stall.join().unwrap();
    let left = eventually(Duration::from_secs(3), || {
        queue(&mut raw, NAME).is_empty() && deadlines(&mut raw, NAME).is_empty()
    })
    .await;
    assert!(
        left,
        "a place nobody leaves: queue {:?}, deadlines (ms from now) {:?}",
        queue(&mut raw, NAME),
        deadlines(&mut raw, NAME)
            .into_iter()
            .map(|(h, d)| (h, d - epoch_ms()))
            .collect::<Vec<_>>()
    );
    held.release().await.unwrap();
}

/// Leak 4: clones of one handle with different waits (`try_acquire_for(3 s)` first, then
/// `acquire()`), a Redisson waiter queued behind their place with a 10 s wait. Both clones end
/// without the lock (the one with the long wait last, cancelled): the place's leave gives those
/// behind it back the wait the place was made with — one place wait per manager,
/// `min(fair_lock_wait_timeout, fair_lock_place_timeout)`, 5 s here, whatever the clones' own
/// waits — so the Java waiter keeps its place about `10 s + the place ahead − 5 s` ahead, never
/// in the past (the old code moved the place on by the second clone's 300 s wait at its
/// come-back, left with 300 s and so put the Java waiter's deadline about 4 minutes in the past:
/// pruned, a live waiter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_with_different_waits_leave_those_behind_their_own_wait() {
    const NAME: &str = "leak4";
    const JAVA: &str = "java-client:4";
    const JAVA_WAIT: i64 = 10_000;
    // Every place of a manager waits min(fair_lock_wait_timeout, fair_lock_place_timeout): the
    // defaults, 300 s and 5 s.
    const PLACE: i64 = 5_000;
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mut java = server.conn();
    let (x, m) = (
        manager(Config::new(server.url())).await,
        manager(Config::new(server.url())).await,
    );
    let held = x.fair_lock(NAME).acquire().await.unwrap(); // 30 s watchdog lease
    let lock = m.fair_lock(NAME);
    let id = lock.holder_id();
    let short = tokio::spawn({
        let lock = lock.clone();
        async move { lock.try_acquire_for(Duration::from_secs(3)).await }
    });
    queue_becomes(
        &server,
        NAME,
        std::slice::from_ref(&id),
        Duration::from_secs(2),
    )
    .await;
    // The Java waiter joins behind (Redisson's tryLock(10 s, …)): its wait after the place ahead.
    let told = redisson::fair_try_lock(&mut java, NAME, JAVA, 30_000, JAVA_WAIT);
    assert!(told.is_some(), "the lock is held");
    let d = deadlines(&mut raw, NAME);
    assert_eq!(at(&d, JAVA) - at(&d, &id), JAVA_WAIT, "{d:?}");
    // The clone with the long wait comes back to the holder's place: its attempt has run (the
    // only script here meanwhile but a rare renewal of the 30 s holder) before the short wait
    // ends.
    support::commands::reset_stats(&mut raw);
    let long = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire().await }
    });
    support::wait::calls_reach(&mut raw, "evalsha", 1).await;
    assert_eq!(queue(&mut raw, NAME), vec![id.clone(), JAVA.to_owned()]);
    let place_due = at(&deadlines(&mut raw, NAME), &id) - epoch_ms();
    assert!(short.await.unwrap().unwrap().is_none());
    assert!(!long.is_finished());
    assert_eq!(queue(&mut raw, NAME), vec![id.clone(), JAVA.to_owned()]);
    let before = at(&deadlines(&mut raw, NAME), JAVA);
    long.abort(); // the holder's last waiter: its place is left
    let _ = long.await;
    queue_becomes(&server, NAME, &[JAVA.to_owned()], Duration::from_secs(2)).await;
    let after = at(&deadlines(&mut raw, NAME), JAVA);
    let java_due = after - epoch_ms();
    // 10 s after the place ahead (at most 30 s + 5 s ahead, or the place timeout and 5 s on a
    // capped head), less the place's 5 s: between 5 s and 40 s ahead.
    assert!(
        (JAVA_WAIT - PLACE - 500..=40_000).contains(&java_due),
        "the Java waiter's deadline is {java_due} ms from now (the place ahead of it was \
         {place_due} ms ahead after the second clone came back)"
    );
    // Exactly the place's 5 s back, from where the Java waiter was when the leave ran: at most
    // one refresh of the place (every place timeout / 3) moved it on after it was read.
    assert!(
        (before - PLACE..=before - PLACE + 2_000).contains(&after),
        "the leave gave back {} ms",
        before - after
    );
    assert!(
        place_due <= 40_000,
        "the place keeps the first clone's wait: {place_due} ms ahead"
    );
    redisson::fair_give_up(&mut java, NAME, JAVA, JAVA_WAIT);
    assert!(queue(&mut raw, NAME).is_empty() && deadlines(&mut raw, NAME).is_empty());
    held.release().await.unwrap();
}

/// Leak 1: a fair attempt whose reply is lost (the server paused past the response time-out)
/// is sent again and again meanwhile; its waiter's wait runs out during the pause and it leaves
/// the queue. When the server goes on, it runs everything in order: the attempt (queued), the
/// leave, then a resend, which queues the holder anew with its waiter gone. That resend's busy
/// reply must leave again (the old code left the place there, 30.7 s ahead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_sent_again_after_its_waiter_left_leaves_again() {
    const NAME: &str = "leak1";
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (x, m) = (
        manager(Config::new(server.url())).await,
        manager(Config::new(server.url()).response_timeout(Duration::from_millis(400))).await,
    );
    let held = x.fair_lock(NAME).acquire().await.unwrap(); // 30 s watchdog lease
    let lock = m.fair_lock(NAME);
    let id = lock.holder_id();
    support::commands::reset_stats(&mut raw);
    // Paused 1.6 s: the attempt (0 s) and its resends (at about 0.45 s, 0.95 s, 1.55 s) wait
    // in the server, and so does the leave at the end of the 700 ms wait.
    let stall = server.stall(1.6);
    let started = Instant::now();
    let got = lock.try_acquire_for(Duration::from_millis(700)).await;
    // Redis did not answer within the wait: it says so (issue 57; was `Ok(None)`).
    assert!(
        matches!(got, Err(lockman::LockError::Unavailable { .. })),
        "{got:?}"
    );
    let gave_up = started.elapsed();
    stall.join().unwrap();
    let evals = support::commands::command_calls(&mut raw, "evalsha");
    assert!(evals >= 3, "the attempt, the leave and a resend: {evals}");
    let left = eventually(Duration::from_secs(3), || {
        queue(&mut raw, NAME).is_empty() && deadlines(&mut raw, NAME).is_empty()
    })
    .await;
    assert!(
        left,
        "a place nobody leaves: queue {:?} (holder {id}), deadlines (ms from now) {:?}",
        queue(&mut raw, NAME),
        deadlines(&mut raw, NAME)
            .into_iter()
            .map(|(h, d)| (h, d - epoch_ms()))
            .collect::<Vec<_>>()
    );
    assert!(gave_up < Duration::from_secs(3), "{gave_up:?}");
    held.release().await.unwrap();
}

/// Leak 6: under `sync_replicas`, a waiter's leave must reach a replica before it counts as
/// done. The replica is cut off from the primary (made to follow a closed port) before a
/// queued waiter gives up, so the leave runs on the primary only; then the primary dies (SIGKILL) and the sentinels promote the replica,
/// which never saw the leave. A leave that waited for the replica's acknowledgement failed and
/// is sent again, and reaches the new primary; the old code counted it done at once and left
/// the place on the new primary, with no waiter, until its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_unacknowledged_by_a_replica_is_sent_again_through_a_failover() {
    use support::sentinel::{DATA_PASSWORD, MASTER, SentinelGroup};
    const NAME: &str = "leak6";
    let mut group = SentinelGroup::start();
    let config = Config::sentinel(MASTER, group.sentinel_urls())
        .master_auth(None, DATA_PASSWORD)
        .watchdog_timeout(Duration::from_secs(15))
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .sync_replicas(1, Duration::from_millis(500));
    let m = manager(config).await;
    let first = group.primary_port();
    let held = m.fair_lock(NAME).acquire().await.unwrap();
    let lock = m.fair_lock(NAME);
    let id = lock.holder_id();
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { lock.try_acquire_for(Duration::from_secs(1)).await }
    });
    let replica_port = group.other(first).port();
    let mut on_replica = SentinelGroup::data_conn(replica_port).expect("the replica answers");
    assert!(
        eventually(Duration::from_secs(3), || queue(&mut on_replica, NAME)
            == [id.clone()])
        .await,
        "the place reached the replica"
    );
    // The replica stops hearing from the primary: it follows a port nobody listens on (it
    // keeps its data and stays a replica; the sentinels leave it so for the failover timeout).
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(support::closed_port())
        .query(&mut on_replica)
        .unwrap();
    // The wait runs out: the leave runs on the primary, which the replica never hears of. (Its
    // last try at the deadline is answered after `WAIT`'s 500 ms, with the replica cut off:
    // past the last try's 250 ms, so `Unavailable`, as for every lock kind under replica sync.)
    let gave_up = waiting.await.unwrap();
    assert!(
        matches!(gave_up, Ok(None) | Err(LockError::Unavailable { .. })),
        "{gave_up:?}"
    );
    let mut on_first = SentinelGroup::data_conn(first).expect("the primary answers");
    assert!(
        eventually(Duration::from_secs(2), || queue(&mut on_first, NAME)
            .is_empty())
        .await,
        "the leave ran on the primary"
    );
    let second = group.kill_primary().expect("a failover after the crash"); // SIGKILL
    let mut on_second = SentinelGroup::data_conn(second).expect("the new primary answers");
    let promoted = Instant::now();
    let left = eventually(Duration::from_secs(8), || {
        queue(&mut on_second, NAME).is_empty() && deadlines(&mut on_second, NAME).is_empty()
    })
    .await;
    assert!(
        left,
        "a place nobody leaves on the new primary: queue {:?} (holder {id}), deadlines (ms from \
         now) {:?}",
        queue(&mut on_second, NAME),
        deadlines(&mut on_second, NAME)
            .into_iter()
            .map(|(h, d)| (h, d - epoch_ms()))
            .collect::<Vec<_>>()
    );
    assert!(promoted.elapsed() < Duration::from_secs(8));
    drop(held);
    m.shutdown().await;
}

/// Leak 5, with the API of before the place timeout (`fair_lock_wait_timeout` short, 300 ms):
/// three waiters, two of them in one manager, behind a holder that holds for 3 s (renewed by a
/// 1 s watchdog). Every waiter's place is kept, not only the manager's oldest waiter's: none is
/// pruned and they are served in order. (tests/fair.rs has the same with a short place timeout:
/// `live_waiters_keep_their_places_while_the_holder_holds_many_place_timeouts`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_local_waiter_keeps_its_place_with_a_short_wait_timeout() {
    const NAME: &str = "leak5";
    let server = RedisServer::start();
    let mut raw = server.conn();
    let config = || {
        Config::new(server.url())
            .watchdog_timeout(Duration::from_secs(1))
            .fair_lock_wait_timeout(Duration::from_millis(300))
    };
    let holder = manager(config()).await;
    let (m1, m2) = (manager(config()).await, manager(config()).await);
    let held = holder.fair_lock(NAME).acquire().await.unwrap();
    let locks = [m1.fair_lock(NAME), m1.fair_lock(NAME), m2.fair_lock(NAME)];
    let ids: Vec<String> = locks.iter().map(|l| l.holder_id()).collect();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, l) in locks.iter().enumerate() {
        let (l, order) = (l.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let g = l.acquire().await.unwrap();
            order.lock().unwrap().push(i);
            g.release().await.unwrap();
        }));
        queue_becomes(&server, NAME, &ids[..=i], Duration::from_secs(2)).await;
    }
    // Sampled every 50 ms for 3 s: the queue stays as it was, every place ahead of now.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let (q, d, now) = (queue(&mut raw, NAME), deadlines(&mut raw, NAME), epoch_ms());
        assert_eq!(q, ids, "the queue changed (deadlines {d:?}, now {now})");
        for id in &ids {
            assert!(at(&d, id) > now, "{id}'s place expired: {d:?}, now {now}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    held.release().await.unwrap();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(5), t)
            .await
            .expect("served")
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
    assert!(queue(&mut raw, NAME).is_empty() && deadlines(&mut raw, NAME).is_empty());
}

/// lockman's place timeout in the shared-queue test: refreshed every 200 ms.
const PLACE: Duration = Duration::from_millis(600);
const CHILD_URL: &str = "LOCKMAN_TEST_FAIR_LEAKS_CHILD_URL";
const SHARED: &str = "shared";

#[tokio::test]
#[ignore = "child process of a_java_waiter_shares_the_queue_through_a_kill_and_a_leave"]
async fn child_waits_in_the_shared_queue_until_killed() {
    let url = std::env::var(CHILD_URL).expect("run by the parent test");
    let mgr = LockManager::start(Config::new(url).fair_lock_place_timeout(PLACE))
        .await
        .unwrap();
    let lock = mgr.fair_lock(SHARED);
    println!("WAITING {}", lock.holder_id());
    let _ = lock.acquire().await;
}

/// A Java (Redisson) fair waiter and lockman waiters of two managers and a child process share
/// one queue: [child (killed), leaver (gives up), Java, stayer]. The child is killed with
/// SIGKILL (no leave) and the leaver's waiting is cancelled (it leaves); then the holder
/// releases. The Java waiter is served once the dead place expires, and the lockman waiter
/// behind it when the Java side unlocks, in queue order, within bounds; the queue keys end
/// empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_waiter_shares_the_queue_through_a_kill_and_a_leave() {
    const JAVA: &str = "java-client:shared";
    const JAVA_WAIT: i64 = 10_000;
    let server = RedisServer::start();
    let mut raw = server.conn();
    let config = || Config::new(server.url()).fair_lock_place_timeout(PLACE);
    let (a, b) = (manager(config()).await, manager(config()).await);
    let held = a.fair_lock(SHARED).acquire().await.unwrap(); // 30 s watchdog lease
    let (mut child, dead) = support::child::spawn_child_test(
        "child_waits_in_the_shared_queue_until_killed",
        (CHILD_URL, &server.url()),
        "WAITING ",
    );
    queue_becomes(
        &server,
        SHARED,
        std::slice::from_ref(&dead),
        Duration::from_secs(5),
    )
    .await;
    let leaver = b.fair_lock(SHARED);
    let leaving = tokio::spawn({
        let l = leaver.clone();
        async move { l.acquire().await }
    });
    queue_becomes(
        &server,
        SHARED,
        &[dead.clone(), leaver.holder_id()],
        Duration::from_secs(5),
    )
    .await;
    // The Java waiter: RFairLock.tryLock(10 s, 5 s), coming back every 20 ms (a Redisson
    // waiter comes back on its channel's message or when told; more often changes nothing).
    let order = Arc::new(Mutex::new(Vec::<(String, Instant)>::new()));
    let mut java_conn = server.conn();
    assert!(redisson::fair_try_lock(&mut java_conn, SHARED, JAVA, 5_000, JAVA_WAIT).is_some());
    let java = std::thread::spawn({
        let order = order.clone();
        move || {
            let give_up = Instant::now() + Duration::from_secs(15);
            while Instant::now() < give_up {
                if redisson::fair_try_lock(&mut java_conn, SHARED, JAVA, 5_000, JAVA_WAIT).is_none()
                {
                    order
                        .lock()
                        .unwrap()
                        .push((JAVA.to_owned(), Instant::now()));
                    std::thread::sleep(Duration::from_millis(200));
                    let unlocked = redisson::fair_unlock(&mut java_conn, SHARED, JAVA, 5_000);
                    assert_eq!(unlocked, Some(1), "the Java side held the lock");
                    return true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            redisson::fair_give_up(&mut java_conn, SHARED, JAVA, JAVA_WAIT);
            false
        }
    });
    let stayer = a.fair_lock(SHARED);
    let staying = tokio::spawn({
        let (l, order) = (stayer.clone(), order.clone());
        async move {
            let g = l.acquire().await?;
            order.lock().unwrap().push((l.holder_id(), Instant::now()));
            Ok::<_, lockman::LockError>(g)
        }
    });
    let all = vec![
        dead.clone(),
        leaver.holder_id(),
        JAVA.to_owned(),
        stayer.holder_id(),
    ];
    queue_becomes(&server, SHARED, &all, Duration::from_secs(5)).await;
    let d = deadlines(&mut raw, SHARED);
    assert_eq!(
        at(&d, JAVA) - at(&d, &leaver.holder_id()),
        JAVA_WAIT,
        "the Java waiter's wait after the place ahead: {d:?}"
    );
    // The kill (no leave) and the leave.
    child.kill().unwrap();
    child.wait().unwrap();
    leaving.abort();
    let _ = leaving.await;
    let rest = vec![dead.clone(), JAVA.to_owned(), stayer.holder_id()];
    queue_becomes(&server, SHARED, &rest, Duration::from_secs(2)).await;
    let d = deadlines(&mut raw, SHARED);
    assert!(
        at(&d, JAVA) - epoch_ms() > 5_000,
        "the leave gave the Java waiter the leaver's place wait back, no more: {d:?}"
    );
    let released = Instant::now();
    held.release().await.unwrap(); // publishes to the dead head
    let g = support::wait::woken(staying, Duration::from_secs(8)).await;
    assert!(java.join().unwrap(), "the Java waiter was served");
    let order = order.lock().unwrap().clone();
    let names: Vec<&str> = order.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(names, [JAVA, stayer.holder_id().as_str()], "queue order");
    // The dead place expired within about two place timeouts (and a refresh period) of the
    // kill; the Java waiter came back within 20 ms of it; the stayer was woken by the Java
    // unlock's message (200 ms after the Java side took the lock).
    let java_at = order[0].1.saturating_duration_since(released);
    assert!(
        java_at <= 4 * PLACE + Duration::from_millis(500),
        "{java_at:?}"
    );
    let handed = order[1].1.saturating_duration_since(order[0].1);
    assert!(
        (Duration::from_millis(200)..Duration::from_millis(1_500)).contains(&handed),
        "{handed:?}"
    );
    g.release().await.unwrap();
    assert!(
        queue(&mut raw, SHARED).is_empty(),
        "{:?}",
        queue(&mut raw, SHARED)
    );
    assert!(deadlines(&mut raw, SHARED).is_empty());
    assert!(!raw.exists::<_, bool>(SHARED).unwrap());
}
