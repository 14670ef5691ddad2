//! The fair lock: FIFO across processes, the head alone woken, waiters that leave, dead waiters
//! skipped, and queue keys that never grow without bound.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockman::{Config, LockManager};
use redis::Commands;
use support::fair::{deadlines, epoch_ms, queue, server_ms};
use support::{RedisServer, redisson, wait};

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url()))
        .await
        .expect("manager starts")
}

#[tokio::test]
async fn waiters_queue_with_protocol_deadlines_and_only_the_head_is_woken() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let held = a.fair_lock("q").acquire().await.unwrap(); // 30 s watchdog lease
    let (w1, w2, w3) = (b.fair_lock("q"), a.fair_lock("q"), b.fair_lock("q"));
    let now = epoch_ms();
    let mut tasks = Vec::new();
    for (i, w) in [w1.clone(), w2.clone(), w3.clone()].into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            w.try_acquire_for(Duration::from_secs(5)).await.unwrap()
        }));
        // Queued before the next one is spawned: the order below is the spawn order.
        wait::queued(&mut raw, "q", i + 1).await;
    }
    let queued_by = epoch_ms();
    assert_eq!(
        queue(&mut raw, "q"),
        vec![w1.holder_id(), w2.holder_id(), w3.holder_id()]
    );
    // protocol.md: with a 30 000 ms lease and wait 5 000, successive waiters are told 30 000,
    // 35 000, 40 000; lockman's places count at most the place timeout (5 s) of the lease for
    // the head: deadlines 10 000, 15 000, 20 000 ms from when the head queued (Redisson's:
    // 35 000, 40 000, 45 000), and each place behind is its wait after the one ahead. The head
    // queued between `now` and `queued_by`, however long the machine took; 300 ms either side
    // still tells 10 s from Redisson's 35 s and from the whole 30 s lease.
    let d: Vec<i64> = deadlines(&mut raw, "q")
        .into_iter()
        .map(|(_, at)| at - now)
        .collect();
    assert_eq!(d.len(), 3, "deadlines {d:?}");
    let head_by = queued_by - now;
    assert!(
        (10_000 - 300..=10_000 + head_by + 300).contains(&d[0]),
        "deadlines {d:?}, the head queued within {head_by} ms"
    );
    for pair in d.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            (5_000 - 300..=5_000 + 300).contains(&gap),
            "deadlines {d:?}"
        );
    }
    // Only the head's channel hears the release.
    let mut sub = server.client().get_connection().unwrap();
    let mut pubsub = sub.as_pubsub();
    pubsub.psubscribe("redisson_lock__channel:{q}*").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    held.release().await.unwrap();
    let first = pubsub.get_message().unwrap();
    assert_eq!(
        first.get_channel_name(),
        format!("redisson_lock__channel:{{q}}:{}", w1.holder_id())
    );
    let g1 = tasks.remove(0).await.unwrap().expect("the head got it");
    assert_eq!(queue(&mut raw, "q"), vec![w2.holder_id(), w3.holder_id()]);
    assert!(
        !tasks[0].is_finished() && !tasks[1].is_finished(),
        "the others stay asleep"
    );
    g1.release().await.unwrap();
    let g2 = tasks.remove(0).await.unwrap().expect("next in line");
    g2.release().await.unwrap();
    tasks
        .remove(0)
        .await
        .unwrap()
        .expect("last")
        .release()
        .await
        .unwrap();
    assert!(queue(&mut raw, "q").is_empty() && deadlines(&mut raw, "q").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_in_several_managers_acquire_in_arrival_order() {
    let server = RedisServer::start();
    let managers = [
        manager(&server).await,
        manager(&server).await,
        manager(&server).await,
    ];
    let mut raw = server.conn();
    let held = managers[0].fair_lock("fifo").acquire().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..9usize {
        let (lock, order) = (managers[i % 3].fair_lock("fifo"), order.clone());
        tasks.push(tokio::spawn(async move {
            let g = lock.acquire().await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(10)).await;
            g.release().await.unwrap();
        }));
        // Queued in Redis before the next one is spawned: arrival order is spawn order.
        wait::queued(&mut raw, "fifo", i + 1).await;
    }
    held.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..9).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_at_once_and_delays_nobody() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    // Places of 30 s, refreshed every 10 s: no refresh moves a deadline between the reads
    // below, however long a loaded machine takes for the steps between them.
    let places = || Config::new(server.url()).fair_lock_place_timeout(Duration::from_secs(30));
    let (a, b) = (
        LockManager::start(places()).await.unwrap(),
        LockManager::start(places()).await.unwrap(),
    );
    let held = a.fair_lock("leave").acquire().await.unwrap();
    let quitter = b.fair_lock("leave");
    let quit = {
        let q = quitter.clone();
        // 3 s: time enough for the steps below on a loaded machine before it leaves, and
        // not the 30 s a leaver's place gives back to those behind it.
        tokio::spawn(async move { q.try_acquire_for(Duration::from_secs(3)).await.unwrap() })
    };
    wait::queued(&mut raw, "leave", 1).await;
    let dropped = b.fair_lock("leave");
    let _ = tokio::time::timeout(Duration::from_millis(100), dropped.acquire()).await; // cancelled
    let stayer = a.fair_lock("leave");
    let stay = {
        let s = stayer.clone();
        tokio::spawn(async move { s.try_acquire_for(Duration::from_secs(10)).await.unwrap() })
    };
    let want = vec![quitter.holder_id(), stayer.holder_id()];
    wait::until("the dropped one left, the stayer queued", || {
        queue(&mut raw, "leave") == want
    })
    .await;
    let before = deadlines(&mut raw, "leave")
        .into_iter()
        .find(|(h, _)| *h == stayer.holder_id())
        .unwrap()
        .1;
    assert!(quit.await.unwrap().is_none());
    // The leave is sent right after the answer (the caller does not wait for it).
    wait::until("the quitter left", || {
        queue(&mut raw, "leave") == vec![stayer.holder_id()]
    })
    .await;
    let after = deadlines(&mut raw, "leave")[0].1;
    assert_eq!(
        before - after,
        30_000,
        "those behind get the leaver's place wait back: the manager's (min(fair wait timeout, \
         place timeout)), not the caller's 3 s"
    );
    let released = Instant::now();
    held.release().await.unwrap();
    let g = stay.await.unwrap().expect("the new head");
    // Not woken, it would retry only when the 30 s lease runs out (or give up at 10 s).
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "woken on its channel: {:?}",
        released.elapsed()
    );
    g.release().await.unwrap();
    // A single attempt never joins the queue.
    let _g = a.fair_lock("leave").acquire().await.unwrap();
    assert!(b.fair_lock("leave").try_acquire().await.unwrap().is_none());
    assert!(queue(&mut raw, "leave").is_empty());
}

const CHILD_URL: &str = "LOCKMAN_TEST_FAIR_CHILD_URL";
const WAIT: Duration = Duration::from_millis(1_000);

/// The body of the child process of `a_dead_waiter_is_skipped_after_the_wait_timeout`. Its
/// place is kept `WAIT` after its turn, the lock's PTTL counted at most `WAIT` (the place
/// timeout): a dead place ends about two `WAIT`s after its last refresh.
#[tokio::test]
#[ignore = "child process of a_dead_waiter_is_skipped_after_the_wait_timeout"]
async fn child_waits_in_the_fair_queue_until_killed() {
    let url = std::env::var(CHILD_URL).expect("run by the parent test");
    let config = Config::new(url)
        .fair_lock_wait_timeout(WAIT)
        .fair_lock_place_timeout(WAIT);
    let mgr = LockManager::start(config).await.unwrap();
    let lock = mgr.fair_lock("dead");
    println!("WAITING {}", lock.holder_id());
    let _ = lock.acquire().await;
}

/// A waiter killed in the queue walls it until its place's deadline, and not a moment longer.
/// The holder holds by the watchdog until the child has queued (a lease could run out before a
/// slow child starts, and the child would take the lock instead); the deadline is read from
/// Redis once the child is dead, so the bounds hold however late its last refresh came.
#[tokio::test]
async fn a_dead_waiter_is_skipped_after_the_wait_timeout() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let held = mgr.fair_lock("dead").acquire().await.unwrap();
    let (mut child, dead) = support::child::spawn_child_test(
        "child_waits_in_the_fair_queue_until_killed",
        (CHILD_URL, &server.url()),
        "WAITING ",
    );
    wait::until("the child queued", || {
        queue(&mut raw, "dead") == vec![dead.clone()]
    })
    .await;
    child.kill().unwrap(); // SIGKILL: it never leaves the queue
    child.wait().unwrap();
    let due = deadlines(&mut raw, "dead")
        .into_iter()
        .find(|(h, _)| *h == dead)
        .map(|(_, at)| at)
        .expect("the dead waiter's place has a deadline");
    let left = Duration::from_millis((due - server_ms(&mut raw)).max(0) as u64);
    // Its place: the lock's PTTL capped at the place timeout, then its wait.
    assert!(left >= WAIT, "{left:?}");
    held.release().await.unwrap();
    let started = Instant::now();
    let g = mgr.fair_lock("dead").acquire().await.unwrap();
    let took = started.elapsed();
    // Not before the dead place's deadline (100 ms for the reads and the release between),
    // and soon after it: the live waiter asks again when the place is due, not a place
    // timeout (5 s) later.
    assert!(
        took + Duration::from_millis(100) >= left,
        "not before the dead waiter's place expired: took {took:?}, {left:?} left"
    );
    assert!(
        took <= left + Duration::from_secs(2),
        "took {took:?}, {left:?} left"
    );
    assert!(!queue(&mut raw, "dead").contains(&dead));
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_burst_of_500_waiters_the_queue_keys_are_empty() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let mut tasks = Vec::new();
    for i in 0..500u64 {
        let lock = if i % 2 == 0 { &a } else { &b }.fair_lock("burst");
        tasks.push(tokio::spawn(async move {
            if i % 3 == 0 {
                // Gives up (or is served in time), after 1 to 40 ms.
                let wait = Duration::from_millis(1 + (i * 7) % 40);
                if let Some(g) = lock.try_acquire_for(wait).await.unwrap() {
                    g.release().await.unwrap();
                }
            } else {
                lock.acquire().await.unwrap().release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(
        queue(&mut raw, "burst").is_empty(),
        "queue left: {}",
        queue(&mut raw, "burst").len()
    );
    assert!(deadlines(&mut raw, "burst").is_empty());
    assert!(!raw.exists::<_, bool>("burst").unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_keeps_its_place_however_long_the_holder_holds() {
    // The first waiter's place is kept 300 ms after its turn; the holder holds for 3 s, renewed
    // by a 1 s watchdog. The waiter comes back before its deadline each time and keeps its place,
    // so the second waiter (with a long wait of its own) cannot get ahead of it.
    let server = RedisServer::start();
    let mut raw = server.conn();
    let config = |wait: Duration| {
        Config::new(server.url())
            .watchdog_timeout(Duration::from_secs(1))
            .fair_lock_wait_timeout(wait)
    };
    let holder = LockManager::start(config(Duration::from_secs(60)))
        .await
        .unwrap();
    let first = LockManager::start(config(Duration::from_millis(300)))
        .await
        .unwrap();
    let second = LockManager::start(config(Duration::from_secs(60)))
        .await
        .unwrap();
    let held = holder.fair_lock("place").acquire().await.unwrap();
    let (l1, l2) = (first.fair_lock("place"), second.fair_lock("place"));
    let w1 = tokio::spawn({
        let l1 = l1.clone();
        async move { l1.acquire().await }
    });
    // The second asks only once the first is queued (a 100 ms sleep here let a loaded machine
    // queue the second first, and the order asserted below was the other one).
    wait::until("the first waiter queued", || {
        queue(&mut raw, "place") == vec![l1.holder_id()]
    })
    .await;
    let w2 = tokio::spawn({
        let l2 = l2.clone();
        async move { l2.acquire().await }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        queue(&mut raw, "place"),
        vec![l1.holder_id(), l2.holder_id()]
    );
    held.release().await.unwrap();
    let g1 = support::wait::woken(w1, Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!w2.is_finished(), "the second waiter got ahead");
    g1.release().await.unwrap();
    let g2 = support::wait::woken(w2, Duration::from_secs(2)).await;
    g2.release().await.unwrap();
    assert!(queue(&mut raw, "place").is_empty());
}

/// lockman's place timeout in the tests of short places: refreshed every 200 ms.
const PLACE: Duration = Duration::from_millis(600);
const CHILD_PLACE_URL: &str = "LOCKMAN_TEST_FAIR_PLACE_CHILD_URL";

#[tokio::test]
#[ignore = "child process of a_dead_place_walls_a_free_lock_for_about_two_place_timeouts"]
async fn child_holds_a_short_place_until_killed() {
    let url = std::env::var(CHILD_PLACE_URL).expect("run by the parent test");
    let mgr = LockManager::start(Config::new(url).fair_lock_place_timeout(PLACE))
        .await
        .unwrap();
    let lock = mgr.fair_lock("wall");
    println!("WAITING {}", lock.holder_id());
    let _ = lock.acquire().await;
}

/// A lockman waiter killed in the queue (SIGKILL: no leave) with `acquire()`, behind a holder
/// renewed by the watchdog (30 s PTTL): its place was made `min(300 s, K)` after `min(PTTL, K)`
/// and is no longer refreshed, so once the lock is free the live waiter behind it gets in within
/// about two place timeouts (plus a refresh period), not the 300 s of `fair_lock_wait_timeout`
/// nor the holder's PTTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_place_walls_a_free_lock_for_about_two_place_timeouts() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let config = || Config::new(server.url()).fair_lock_place_timeout(PLACE);
    let (a, b) = (
        LockManager::start(config()).await.unwrap(),
        LockManager::start(config()).await.unwrap(),
    );
    let held = a.fair_lock("wall").acquire().await.unwrap();
    let (mut child, dead) = support::child::spawn_child_test(
        "child_holds_a_short_place_until_killed",
        (CHILD_PLACE_URL, &server.url()),
        "WAITING ",
    );
    wait::until("the child queued", || {
        queue(&mut raw, "wall") == vec![dead.clone()]
    })
    .await;
    let live = b.fair_lock("wall");
    let waiter = tokio::spawn({
        let live = live.clone();
        async move { live.acquire().await }
    });
    wait::queued(&mut raw, "wall", 2).await;
    assert_eq!(
        queue(&mut raw, "wall"),
        vec![dead.clone(), live.holder_id()]
    );
    // Both places chain with the place timeout as their wait; the head's is at most two place
    // timeouts ahead (the PTTL counted at most K), not 30 s.
    let now = epoch_ms();
    let d = deadlines(&mut raw, "wall");
    assert_eq!(d.len(), 2);
    let (head, next) = (&d[0], &d[1]);
    assert_eq!(head.0, dead);
    assert!(head.1 - now <= 2 * PLACE.as_millis() as i64, "{d:?}");
    assert!(next.1 - head.1 >= PLACE.as_millis() as i64, "{d:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    held.release().await.unwrap(); // publishes to the dead head
    let g = support::wait::woken(waiter, Duration::from_secs(5)).await;
    let took = killed.elapsed();
    // The dead place was refreshed at most a refresh period before the kill: it expired at
    // most 2K later, and the live waiter's next refresh (every K/3) found the lock free.
    assert!(took <= 2 * PLACE + PLACE, "{took:?}");
    assert!(queue(&mut raw, "wall").is_empty());
    assert!(deadlines(&mut raw, "wall").is_empty());
    g.release().await.unwrap();
}

/// Three waiters, two of them in one manager (only the oldest used to come back), behind a
/// holder that holds for 3 s, ten place timeouts: every place is refreshed, so none is pruned
/// and they are served in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_waiters_keep_their_places_while_the_holder_holds_many_place_timeouts() {
    let place = Duration::from_millis(300);
    let server = RedisServer::start();
    let mut raw = server.conn();
    let config = || {
        Config::new(server.url())
            .watchdog_timeout(Duration::from_secs(1))
            .fair_lock_place_timeout(place)
    };
    let holder = LockManager::start(config()).await.unwrap();
    let (m1, m2) = (
        LockManager::start(config()).await.unwrap(),
        LockManager::start(config()).await.unwrap(),
    );
    let held = holder.fair_lock("alive").acquire().await.unwrap();
    let locks = [
        m1.fair_lock("alive"),
        m1.fair_lock("alive"),
        m2.fair_lock("alive"),
    ];
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, l) in locks.iter().enumerate() {
        let (l, order) = (l.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let g = l.acquire().await.unwrap();
            order.lock().unwrap().push(i);
            g.release().await.unwrap();
        }));
        // Queued before the next one is spawned: spawned 50 ms apart, the second of m1 was
        // once queued first on a loaded machine.
        wait::queued(&mut raw, "alive", i + 1).await;
    }
    let ids: Vec<String> = locks.iter().map(|l| l.holder_id()).collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(queue(&mut raw, "alive"), ids);
    let d = deadlines(&mut raw, "alive");
    let now = epoch_ms();
    let by_holder = |h: &str| d.iter().find(|(x, _)| x == h).map(|(_, at)| *at).unwrap();
    // Each place is alive (ahead of now): none was pruned, after ten place timeouts.
    let mut members: Vec<&str> = d.iter().map(|(h, _)| h.as_str()).collect();
    members.sort_unstable();
    let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(members, want);
    for id in &ids {
        assert!(by_holder(id) > now, "{d:?}");
    }
    held.release().await.unwrap();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(5), t)
            .await
            .expect("served")
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
    assert!(queue(&mut raw, "alive").is_empty());
    assert!(deadlines(&mut raw, "alive").is_empty());
}

/// A Redisson waiter queued behind a lockman place keeps `D = D_ahead + wait` while the lockman
/// place is refreshed: its deadline moves on with the place ahead. Were it left behind, the
/// time Redisson's script tells it to come back in (`D − wait − now`, the place ahead's deadline
/// as it was) would go negative after about a place timeout, and a Redisson `lock()` would then
/// wait for a message with no time limit. The Java side joins as Redisson's script does: at the
/// tail, its wait after the deadline of the waiter ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_waiter_behind_a_refreshed_place_keeps_its_wait_after_it() {
    const JAVA_WAIT: i64 = 60_000;
    let place = Duration::from_millis(300);
    let server = RedisServer::start();
    let mut raw = server.conn();
    let config = || Config::new(server.url()).fair_lock_place_timeout(place);
    let (holder, waiting) = (
        LockManager::start(config()).await.unwrap(),
        LockManager::start(config()).await.unwrap(),
    );
    let held = holder.fair_lock("java-behind").acquire().await.unwrap();
    let lock = waiting.fair_lock("java-behind");
    let id = lock.holder_id();
    let waiter =
        tokio::spawn(async move { lock.acquire().await.map(|g| g.holder_id().to_owned()) });
    wait::until("the lockman waiter queued", || {
        queue(&mut server.conn(), "java-behind") == [id.clone()]
    })
    .await;
    let java = "java-client:1".to_owned();
    let ahead = deadlines(&mut raw, "java-behind")[0].1;
    // Joined in one script (Redisson's tryLock attempt): read-then-write from here would race a
    // refresh moving the place ahead on in between.
    let busy = redisson::fair_try_lock(&mut raw, "java-behind", &java, 30_000, JAVA_WAIT);
    assert!(busy.is_some(), "the lock is held");
    // Many refreshes (every place / 3) and at least one come-back later.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(queue(&mut raw, "java-behind"), [id.clone(), java.clone()]);
    let d = deadlines(&mut raw, "java-behind");
    let at = |h: &str| d.iter().find(|(x, _)| x == h).map(|(_, at)| *at).unwrap();
    assert!(at(&id) > ahead, "the lockman place moved on: {d:?}");
    assert_eq!(at(&java) - at(&id), JAVA_WAIT, "{d:?}");
    held.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("served")
        .unwrap()
        .unwrap();
    assert_eq!(got, id);
}

/// A dead place at the head of `name`'s queue (the lock free), 60 s ahead for now.
fn queue_a_dead_head(raw: &mut redis::Connection, name: &str) -> &'static str {
    let dead = "dead-client:1";
    let _: () = redis::pipe()
        .atomic()
        .rpush(format!("redisson_lock_queue:{{{name}}}"), dead)
        .zadd(
            format!("redisson_lock_timeout:{{{name}}}"),
            dead,
            epoch_ms() + 60_000,
        )
        .query(raw)
        .unwrap();
    dead
}

/// Waits until `name`'s queue holds `n` places.
async fn queue_reaches(server: &RedisServer, name: &str, n: usize) {
    wait::queued(&mut server.conn(), name, n).await;
}

/// Every message on `name`'s waiter channels (`pubsub` subscribed by `watch_waiter_channels`)
/// until none comes for 200 ms, as (channel, payload).
fn messages(pubsub: &mut redis::PubSub) -> Vec<(String, String)> {
    let mut messages = Vec::new();
    while let Ok(m) = pubsub.get_message() {
        messages.push((
            m.get_channel_name().to_owned(),
            m.get_payload::<String>().unwrap(),
        ));
    }
    messages
}

/// Subscribes `pubsub` to every waiter channel of `name`, reads timing out after 200 ms.
fn watch_waiter_channels(pubsub: &mut redis::PubSub, name: &str) {
    pubsub
        .psubscribe(format!("redisson_lock__channel:{{{name}}}*"))
        .unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
}

/// A refresh whose prune drops the dead head of a free lock wakes the new head, another
/// manager's waiter, on its own channel at once (one message), as a release would: it takes the
/// lock well within its own retry (the busy reply's 60 s) and its own refresh period (10 s).
/// Before, nobody told it, and it waited for one of those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_that_prunes_the_dead_head_of_a_free_lock_wakes_the_next_waiter() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let refresher = LockManager::start(
        Config::new(server.url()).fair_lock_place_timeout(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    let slow = LockManager::start(
        Config::new(server.url()).fair_lock_place_timeout(Duration::from_secs(30)),
    )
    .await
    .unwrap();
    let dead = queue_a_dead_head(&mut raw, "prune-wake");
    let next = slow.fair_lock("prune-wake");
    let next_id = next.holder_id();
    let waiter = tokio::spawn(async move { next.acquire().await });
    queue_reaches(&server, "prune-wake", 2).await;
    let behind = refresher.fair_lock("prune-wake");
    let behind_id = behind.holder_id();
    let behind_task = tokio::spawn(async move { behind.acquire().await });
    queue_reaches(&server, "prune-wake", 3).await;
    assert_eq!(
        queue(&mut raw, "prune-wake"),
        [dead.to_owned(), next_id.clone(), behind_id.clone()]
    );
    let mut sub = server.client().get_connection().unwrap();
    let mut pubsub = sub.as_pubsub();
    watch_waiter_channels(&mut pubsub, "prune-wake");
    // The dead place expires in 100 ms: the refresher's next refresh (every 100 ms) prunes it.
    let _: () = raw
        .zadd("redisson_lock_timeout:{prune-wake}", dead, epoch_ms() + 100)
        .unwrap();
    let expired = Instant::now();
    let g = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken well before its own retry")
        .unwrap()
        .unwrap();
    let took = expired.elapsed();
    assert!(took < Duration::from_millis(1_500), "{took:?}");
    assert_eq!(g.holder_id(), next_id);
    assert_eq!(
        messages(&mut pubsub),
        [(
            format!("redisson_lock__channel:{{prune-wake}}:{next_id}"),
            "0".to_owned()
        )]
    );
    g.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), behind_task)
        .await
        .expect("served")
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    assert!(queue(&mut raw, "prune-wake").is_empty());
}

/// The acquire path: a single try of a third manager whose prune drops the dead head of a free
/// lock wakes the new head (not itself: it is not that head, and takes nothing), once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_that_prunes_the_dead_head_of_a_free_lock_wakes_the_next_waiter() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let slow = LockManager::start(
        Config::new(server.url()).fair_lock_place_timeout(Duration::from_secs(30)),
    )
    .await
    .unwrap();
    let prober = manager(&server).await;
    let dead = queue_a_dead_head(&mut raw, "acquire-wake");
    let next = slow.fair_lock("acquire-wake");
    let next_id = next.holder_id();
    let waiter = tokio::spawn(async move { next.acquire().await });
    queue_reaches(&server, "acquire-wake", 2).await;
    // The waiter subscribes its channel once queued, then tries once more (it finds the dead
    // head still alive, and waits): only after that attempt is the head made dead, so that the
    // prober's try is what prunes it. Made dead earlier, the waiter's own attempt pruned it and
    // took the lock with no message (seen twice in CI under load).
    let channel = format!("redisson_lock__channel:{{acquire-wake}}:{next_id}");
    wait::subscribers(&mut raw, &channel, 1).await;
    wait::quiet(&mut raw).await;
    let mut sub = server.client().get_connection().unwrap();
    let mut pubsub = sub.as_pubsub();
    watch_waiter_channels(&mut pubsub, "acquire-wake");
    // The dead head's deadline passes now (no sleep to wait it out: the shorter the time
    // between this and the prober's try, the less room for any other script to prune first).
    let _: () = raw
        .zadd("redisson_lock_timeout:{acquire-wake}", dead, epoch_ms() - 1)
        .unwrap();
    let pruned = Instant::now();
    assert!(
        prober
            .fair_lock("acquire-wake")
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "the new head's turn, not the prober's"
    );
    let g = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken well before its own retry")
        .unwrap()
        .unwrap();
    let took = pruned.elapsed();
    assert!(took < Duration::from_millis(1_500), "{took:?}");
    assert_eq!(messages(&mut pubsub), [(channel, "0".to_owned())]);
    g.release().await.unwrap();
    assert!(queue(&mut raw, "acquire-wake").is_empty());
}

/// A queue whose tail has no deadline (a member of the list that the set lacks: a Redisson
/// client can leave one), behind a lock Redisson clients hold and wait for. lockman's join used
/// to fail on it with a Lua error (the tail's score read as a number), as did its come-back
/// behind it; every lockman join failed until that member became the head, where lockman's
/// prune then dropped it. Now lockman joins as Redisson 4's join does: the lock's PTTL stands
/// for the tail's deadline. The tail keeps its turn and, served, hands the lock on to lockman.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lockman_join_behind_a_tail_with_no_deadline_counts_the_pttl_as_redisson_does() {
    const NAME: &str = "scoreless-tail";
    const HOLDER: &str = "java-client:1";
    const AHEAD: &str = "java-client:2";
    const TAIL: &str = "java-client:3";
    const LEASE: i64 = 30_000;
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let ahead_due = server_ms(&mut raw) + 60_000;
    let _: () = redis::pipe()
        .atomic()
        .hset(NAME, HOLDER, 1)
        .ignore()
        .pexpire(NAME, LEASE)
        .ignore()
        .rpush("redisson_lock_queue:{scoreless-tail}", &[AHEAD, TAIL])
        .ignore()
        .zadd("redisson_lock_timeout:{scoreless-tail}", AHEAD, ahead_due)
        .ignore()
        .query(&mut raw)
        .unwrap();
    // When the lock expires, in the server's clock.
    let expiry = server_ms(&mut raw) + raw.pttl::<_, i64>(NAME).unwrap();
    let lock = mgr.fair_lock(NAME);
    let id = lock.holder_id();
    let waiter = tokio::spawn(async move { lock.acquire().await });
    queue_reaches(&server, NAME, 3).await;
    assert_eq!(queue(&mut raw, NAME), [AHEAD, TAIL, id.as_str()]);
    // Redisson's join there: ttl = the PTTL, deadline = now + ttl + wait (lockman's place wait,
    // min(300 s, K) = 5 s), so the lock's expiry + 5 s; neither the come-back after subscribing
    // nor a refresh (now + min(PTTL, K) + wait, behind the tail) moves it earlier. The tail has
    // still no deadline, the waiter ahead its own (later than the lockman place's: Redisson's
    // chain gives the same).
    let d: std::collections::HashMap<String, i64> = deadlines(&mut raw, NAME).into_iter().collect();
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!(d.get(AHEAD), Some(&ahead_due), "{d:?}");
    let off = d[&id] - (expiry + 5_000);
    assert!(
        (-5..=5).contains(&off),
        "{off} ms off Redisson's deadline: {d:?}"
    );
    assert!(!waiter.is_finished(), "the lockman waiter waits");
    // The Java side takes its turns: the holder unlocks, the waiter ahead takes and unlocks (its
    // unlock wakes the tail), the tail, never pruned though it has no deadline, takes it and
    // unlocks, which wakes the lockman waiter now at the head. (Each Java grant takes its wait,
    // 5 s as the lockman place's, off every deadline, as Redisson's does.)
    assert_eq!(
        redisson::fair_unlock(&mut raw, NAME, HOLDER, LEASE),
        Some(1)
    );
    assert_eq!(
        redisson::fair_try_lock(&mut raw, NAME, AHEAD, LEASE, 5_000),
        None
    );
    assert_eq!(redisson::fair_unlock(&mut raw, NAME, AHEAD, LEASE), Some(1));
    assert_eq!(queue(&mut raw, NAME), [TAIL, id.as_str()]);
    assert_eq!(
        redisson::fair_try_lock(&mut raw, NAME, TAIL, LEASE, 5_000),
        None,
        "the tail's turn"
    );
    assert_eq!(queue(&mut raw, NAME), [id.as_str()]);
    assert_eq!(redisson::fair_unlock(&mut raw, NAME, TAIL, LEASE), Some(1));
    let g = support::wait::woken(waiter, Duration::from_secs(5)).await;
    assert_eq!(g.holder_id(), id);
    assert!(queue(&mut raw, NAME).is_empty());
    assert!(deadlines(&mut raw, NAME).is_empty());
    g.release().await.unwrap();
}

/// A free lock whose queue head has no deadline: Redisson's prune keeps such a head (it is not
/// known to be gone), and so does lockman's now (it dropped it, and a lockman try took the lock
/// out of the head's turn). A lockman try is told to come back later, with nothing changed; the
/// head, back, takes its turn.
#[tokio::test]
async fn a_head_with_no_deadline_is_not_pruned() {
    const NAME: &str = "scoreless-head";
    const HEAD: &str = "java-client:1";
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let _: () = raw
        .rpush("redisson_lock_queue:{scoreless-head}", HEAD)
        .unwrap();
    let lock = mgr.fair_lock(NAME);
    assert!(
        lock.try_acquire().await.unwrap().is_none(),
        "the head's turn, not the try's"
    );
    assert_eq!(queue(&mut raw, NAME), [HEAD]);
    assert!(deadlines(&mut raw, NAME).is_empty());
    assert!(!raw.exists::<_, bool>(NAME).unwrap());
    assert_eq!(
        redisson::fair_try_lock(&mut raw, NAME, HEAD, 30_000, 60_000),
        None,
        "the head, back, takes its turn"
    );
    assert!(queue(&mut raw, NAME).is_empty());
    assert_eq!(redisson::fair_unlock(&mut raw, NAME, HEAD, 30_000), Some(1));
    lock.try_acquire()
        .await
        .unwrap()
        .expect("free, nobody queued")
        .release()
        .await
        .unwrap();
}
