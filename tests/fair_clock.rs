//! Clients whose clocks are off. The fair lock: lockman's fair scripts read the Redis server's
//! clock (`TIME`), so a lockman client 15 s slow or fast neither loses its own live place nor
//! prunes another's. `scope`: a system clock that runs ahead of the monotonic one (what a host
//! suspend looks like to the process) stops the work by the system clock. Each skewed client is
//! a child process of this test binary run under libfaketime (preloaded, not the `faketime`
//! wrapper), its monotonic clock left true.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lockman::{Config, LockManager};
use redis::Commands;
use support::commands::reset_stats;
use support::fair::{SkewedChild, deadlines, epoch_ms, queue, server_ms};
use support::locks::count_rounds;
use support::{RedisServer, redisson, wait, wait::eventually};

const CHILD_URL: &str = "LOCKMAN_TEST_FAIR_CLOCK_CHILD_URL";
const SLOW: &str = "skew-slow";
const FAST: &str = "skew-fast";
/// The default place timeout `K`: a place at the head of a held lock is due `2K` from now.
const K: i64 = 5_000;
/// How long a child may take to start (a test binary under libfaketime) and answer.
const CHILD_LIMIT: Duration = Duration::from_secs(30);

async fn manager(url: String) -> LockManager {
    LockManager::start(Config::new(url))
        .await
        .expect("manager starts")
}

/// Asserts that the child's wall clock is `skew_ms` off this one's, give or take 2 s (the
/// child printed it as `CLOCK <epoch ms>`): the skew is real.
fn assert_skew(child: &mut SkewedChild, skew_ms: i64) {
    let clock: i64 = child.expect_line("CLOCK ", CHILD_LIMIT).parse().unwrap();
    let off = clock - epoch_ms();
    assert!(
        (skew_ms - 2_000..=skew_ms + 2_000).contains(&off),
        "the child's clock is {off} ms off, not {skew_ms}"
    );
}

/// The body of the slow child of
/// `a_lockman_client_15_s_slow_keeps_its_head_place_and_is_served`: waits for the lock, holds
/// it until told on stdin, releases it.
#[tokio::test]
#[ignore = "child process of a_lockman_client_15_s_slow_keeps_its_head_place_and_is_served"]
async fn child_waits_for_the_fair_lock_and_holds_it_until_told() {
    let url = std::env::var(CHILD_URL).expect("run by the parent test");
    let mgr = manager(url).await;
    let lock = mgr.fair_lock(SLOW);
    println!("CLOCK {}", epoch_ms());
    println!("WAITING {}", lock.holder_id());
    let guard = lock.acquire().await.unwrap();
    println!("ACQUIRED");
    tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new()))
        .await
        .unwrap()
        .unwrap();
    guard.release().await.unwrap();
    println!("RELEASED");
    mgr.shutdown().await;
}

/// A lockman client whose clock is 15 s slow waits at the head of a held fair lock, and a
/// client with a true clock queues behind it. With each client's own clock as `now`, the slow
/// client's head place (`now + min(PTTL, K) + K`, 10 s ahead of its clock) was 5 s in the past
/// by the others': the true client's join pruned it, and the slow client queued again at the
/// tail (under contention, each time it reached the head: starved). With the server's clock the
/// place is 10 s ahead, it stays at the head, and the slow client is served first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lockman_client_15_s_slow_keeps_its_head_place_and_is_served() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (holder, other) = (manager(server.url()).await, manager(server.url()).await);
    let held = holder.fair_lock(SLOW).acquire().await.unwrap(); // 30 s lease, renewed
    let mut child = SkewedChild::spawn(
        "child_waits_for_the_fair_lock_and_holds_it_until_told",
        (CHILD_URL, &server.url()),
        "-15s",
    );
    assert_skew(&mut child, -15_000);
    let slow = child.expect_line("WAITING ", CHILD_LIMIT);
    assert!(
        eventually(Duration::from_secs(5), || queue(&mut raw, SLOW)
            == [slow.clone()])
        .await,
        "{:?}",
        queue(&mut raw, SLOW)
    );
    // Its place, in the server's clock: `min(PTTL, K) + K` ahead when it joined, moved on by a
    // refresh (every K/3) since.
    let due = deadlines(&mut raw, SLOW)[0].1 - server_ms(&mut raw);
    assert!(
        (2 * K - K / 3 - 1_000..=2 * K).contains(&due),
        "the slow client's head place is due in {due} ms"
    );
    let on_time = other.fair_lock(SLOW);
    let on_time_id = on_time.holder_id();
    let waiter = tokio::spawn(async move { on_time.acquire().await });
    assert!(
        eventually(Duration::from_secs(5), || queue(&mut raw, SLOW).len() == 2).await,
        "{:?}",
        queue(&mut raw, SLOW)
    );
    assert_eq!(queue(&mut raw, SLOW), [slow.clone(), on_time_id.clone()]);
    held.release().await.unwrap(); // wakes the head
    child.expect_line("ACQUIRED", Duration::from_secs(5));
    let fields: HashMap<String, String> = raw.hgetall(SLOW).unwrap();
    assert_eq!(fields, HashMap::from([(slow.clone(), "1".to_owned())]));
    assert_eq!(queue(&mut raw, SLOW), [on_time_id.as_str()]);
    assert!(!waiter.is_finished(), "served before the slow head");
    child.say("release");
    child.expect_line("RELEASED", Duration::from_secs(5));
    let g = support::wait::woken(waiter, Duration::from_secs(5)).await;
    assert_eq!(g.holder_id(), on_time_id);
    assert!(child.wait());
    g.release().await.unwrap();
    assert!(queue(&mut raw, SLOW).is_empty());
    assert!(deadlines(&mut raw, SLOW).is_empty());
}

/// The body of the fast child of `a_lockman_client_15_s_fast_prunes_no_live_place`: one try
/// (which prunes the queue first, and never queues).
#[tokio::test]
#[ignore = "child process of a_lockman_client_15_s_fast_prunes_no_live_place"]
async fn child_tries_the_fair_lock_once() {
    let url = std::env::var(CHILD_URL).expect("run by the parent test");
    let mgr = manager(url).await;
    println!("CLOCK {}", epoch_ms());
    let got = mgr.fair_lock(FAST).try_acquire().await.unwrap();
    println!("TRIED {}", if got.is_some() { "acquired" } else { "busy" });
    // What `describe` (`lockman inspect`) says of the head's place, read with this clock.
    let info = mgr.describe(FAST).await.unwrap();
    let due = info.queue.first().map_or(0, |w| w.times_out_in.as_millis());
    println!("DUE {due}");
    mgr.shutdown().await;
}

/// A lockman client whose clock is 15 s fast tries a held fair lock once. With its own clock as
/// `now`, its prune dropped the live lockman place at the head (due 10 s from now, so 5 s
/// before its `now`), which queued again at the tail, behind the Redisson waiter that had been
/// behind it. With the server's clock nothing is pruned: the order stays, and the lockman
/// waiter is served first. Its `describe` counts the place's countdown from the server's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lockman_client_15_s_fast_prunes_no_live_place() {
    const JAVA: &str = "java-client:1";
    const JAVA_WAIT: i64 = 300_000;
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (holder, other) = (manager(server.url()).await, manager(server.url()).await);
    let held = holder.fair_lock(FAST).acquire().await.unwrap(); // 30 s lease, renewed
    let lockman = other.fair_lock(FAST);
    let id = lockman.holder_id();
    let waiter = tokio::spawn(async move { lockman.acquire().await });
    assert!(
        eventually(Duration::from_secs(5), || queue(&mut raw, FAST)
            == [id.clone()])
        .await,
        "{:?}",
        queue(&mut raw, FAST)
    );
    // A Redisson waiter behind it: it never refreshes nor queues again by itself, so the order
    // tells whether the lockman place was ever dropped.
    let busy = redisson::fair_try_lock(&mut raw, FAST, JAVA, 30_000, JAVA_WAIT);
    assert!(busy.is_some(), "the lock is held");
    assert_eq!(queue(&mut raw, FAST), [id.clone(), JAVA.to_owned()]);
    let mut child = SkewedChild::spawn(
        "child_tries_the_fair_lock_once",
        (CHILD_URL, &server.url()),
        "+15s",
    );
    assert_skew(&mut child, 15_000);
    assert_eq!(child.expect_line("TRIED ", CHILD_LIMIT), "busy");
    // The place's countdown is counted from the server's clock, not the reader's (15 s
    // ahead, it would have read the place as due already).
    let due: i64 = child.expect_line("DUE ", CHILD_LIMIT).parse().unwrap();
    let true_due = deadlines(&mut raw, FAST)[0].1 - server_ms(&mut raw);
    assert!(
        (true_due - 1_000..=true_due + 1_000).contains(&due) && due > 0,
        "describe under a 15 s fast clock: due in {due} ms, truly {true_due} ms"
    );
    assert!(child.wait());
    assert_eq!(queue(&mut raw, FAST), [id.clone(), JAVA.to_owned()]);
    let d = deadlines(&mut raw, FAST);
    let now = server_ms(&mut raw);
    let at = |h: &str| d.iter().find(|(x, _)| x == h).map(|(_, at)| *at).unwrap();
    assert!(at(&id) > now, "{d:?}");
    assert_eq!(at(JAVA) - at(&id), JAVA_WAIT, "{d:?}");
    held.release().await.unwrap();
    let g = support::wait::woken(waiter, Duration::from_secs(5)).await;
    assert_eq!(g.holder_id(), id);
    g.release().await.unwrap();
    assert_eq!(queue(&mut raw, FAST), [JAVA.to_owned()]);
}

/// The kept channel's lock and the counter of the skewed clients of
/// `lockman_clients_an_hour_off_exclude_and_wake_on_the_kept_channel`.
const KEPT: &str = "skew-kept";
const COUNTED: &str = "skew-counted";
const COUNTER: &str = "skew-counted:n";
/// The counted rounds of each client.
const COUNT_ROUNDS: u32 = 20;

/// The body of the skewed children of
/// `lockman_clients_an_hour_off_exclude_and_wake_on_the_kept_channel`: told `wait` on stdin, it
/// says `TRYING`, acquires the (unfair) lock `KEPT` and releases it; told `count`, it runs its
/// counted rounds on `COUNTED`; told `end`, it shuts down. Its manager lingers: the channel it
/// waited on is kept between waits.
#[tokio::test]
#[ignore = "child process of lockman_clients_an_hour_off_exclude_and_wake_on_the_kept_channel"]
async fn child_waits_on_the_kept_channel_and_counts_when_told() {
    let url = std::env::var(CHILD_URL).expect("run by the parent test");
    let config = Config::new(url.clone()).idle_linger(Duration::from_secs(120));
    let mgr = LockManager::start(config).await.expect("manager starts");
    let conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    println!("CLOCK {}", epoch_ms());
    loop {
        let line = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|_| line)
        })
        .await
        .unwrap()
        .unwrap();
        match line.trim() {
            "wait" => {
                println!("TRYING");
                let guard = mgr.lock(KEPT).acquire().await.unwrap();
                guard.release().await.unwrap();
                println!("RELEASED");
            }
            "count" => {
                count_rounds(mgr.lock(COUNTED), conn.clone(), COUNTER, COUNT_ROUNDS).await;
                println!("COUNTED");
            }
            _ => break,
        }
    }
    mgr.shutdown().await;
    println!("DONE");
}

/// Two lockman clients whose wall clocks are an hour slow and an hour fast wait on an unfair
/// lock held by a client with a true clock, three times: each time both have tried and are
/// parked (no script runs), and the holder's release wakes one, whose release wakes the other,
/// both within [`WOKEN_WITHIN`] (the hold's lease is 60 s: a deaf waiter retries only then).
/// Each keeps the channel between its waits (`PUBSUB NUMSUB` 2 after each round: the kept
/// channel, so the later waits send no SUBSCRIBE). Then the three count rounds on one lock:
/// the counter is exactly their sum. Nothing is left but the counter (and client records).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockman_clients_an_hour_off_exclude_and_wake_on_the_kept_channel() {
    const WOKEN_WITHIN: Duration = Duration::from_secs(5);
    const HOUR_MS: i64 = 3_600_000;
    let server = RedisServer::start();
    let mut raw = server.conn();
    let holder = manager(server.url()).await;
    let mut children = [("-1h", -HOUR_MS), ("+1h", HOUR_MS)].map(|(skew, ms)| {
        let mut child = SkewedChild::spawn(
            "child_waits_on_the_kept_channel_and_counts_when_told",
            (CHILD_URL, &server.url()),
            skew,
        );
        assert_skew(&mut child, ms);
        child
    });
    let ch = format!("redisson_lock__channel:{{{KEPT}}}");
    for round in 0..3 {
        let held = holder
            .lock(KEPT)
            .acquire_with_lease(Duration::from_secs(60))
            .await
            .unwrap();
        reset_stats(&mut raw);
        for child in &mut children {
            child.say("wait");
        }
        for child in &mut children {
            child.expect_line("TRYING", CHILD_LIMIT);
        }
        // Both tried (found it held) and are parked, subscribed.
        wait::calls_reach(&mut raw, "evalsha", 2).await;
        wait::subscribers(&mut raw, &ch, 2).await;
        wait::quiet(&mut raw).await;
        let freed = Instant::now();
        held.release().await.unwrap();
        for child in &mut children {
            child.expect_line("RELEASED", WOKEN_WITHIN + Duration::from_secs(1));
        }
        let took = freed.elapsed();
        assert!(
            took < WOKEN_WITHIN,
            "round {round}: both had it {took:?} after"
        );
        let (_, kept): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&ch)
            .query(&mut raw)
            .unwrap();
        assert_eq!(
            kept, 2,
            "round {round}: each skewed client keeps the channel"
        );
        assert!(!raw.exists::<_, bool>(KEPT).unwrap(), "round {round}: free");
    }

    for child in &mut children {
        child.say("count");
    }
    let conn = server.async_conn().await;
    count_rounds(holder.lock(COUNTED), conn, COUNTER, COUNT_ROUNDS).await;
    for child in &mut children {
        child.expect_line("COUNTED", Duration::from_secs(60));
    }
    let total: u32 = raw.get(COUNTER).unwrap();
    assert_eq!(total, 3 * COUNT_ROUNDS, "exclusion, counted");
    for child in &mut children {
        child.say("end");
        child.expect_line("DONE", CHILD_LIMIT);
    }
    for child in children {
        assert!(child.wait());
    }
    // And the client records (`lockman_client:{lockman}…`) of the managers still running.
    let keys: Vec<String> = raw.keys("*").unwrap();
    let left: Vec<_> = (keys.iter())
        .filter(|k| !k.starts_with("lockman_client:{lockman}"))
        .collect();
    assert_eq!(left, [COUNTER]);
    holder.shutdown().await;
}

/// The lock of `a_wall_clock_running_ahead_stops_a_scope_the_monotonic_clock_would_not`.
const SCOPED: &str = "skew-scoped";
/// Its lease: by the monotonic clock the scope stops 10 % (its margin) and the drift allowance
/// before its end, about 53 s after the grant.
const SCOPED_LEASE: Duration = Duration::from_secs(60);

/// Runs work of 50 ms steps under `guard`'s scope until the scope stops it, or for `work` at
/// most; says how it ended and after how long (monotonic).
async fn scoped_steps(guard: &lockman::LockGuard, work: Duration) -> (String, Duration) {
    let began = Instant::now();
    let steps = async {
        while began.elapsed() < work {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let ended = match guard.scope(steps).await {
        Ok(()) => "done".to_owned(),
        Err(lockman::LockError::HoldExpiring { .. }) => "expiring".to_owned(),
        Err(e) => format!("error {e}"),
    };
    (ended, began.elapsed())
}

/// Takes the lock of [`SCOPED`] with its lease on a manager of its own at `url`, runs `work` of
/// steps under the guard's scope ([`scoped_steps`]), releases it: how the scope ended and when.
async fn scoped_hold(url: String, work: Duration) -> (String, Duration) {
    let mgr = manager(url).await;
    let guard = mgr
        .lock(SCOPED)
        .acquire_with_lease(SCOPED_LEASE)
        .await
        .unwrap();
    let outcome = scoped_steps(&guard, work).await;
    guard.release().await.unwrap();
    mgr.shutdown().await;
    outcome
}

/// The body of the fast child of
/// `a_wall_clock_running_ahead_stops_a_scope_the_monotonic_clock_would_not`: takes the lock with
/// a 60 s lease and runs 40 s of work under its scope.
#[tokio::test]
#[ignore = "child process of a_wall_clock_running_ahead_stops_a_scope_the_monotonic_clock_would_not"]
async fn child_scopes_work_under_a_fast_wall_clock() {
    let url = std::env::var(CHILD_URL).expect("run by the parent test");
    let (ended, took) = scoped_hold(url, Duration::from_secs(40)).await;
    println!("SCOPE {ended} {}", took.as_millis());
}

/// A host suspend stops the monotonic clock while the system clock and Redis's TTL run on; seen
/// from the process, the system clock ran ahead. A child whose system clock runs 20 times
/// faster than its monotonic clock takes a lock with a 60 s lease and scopes 40 s of work: the
/// scope stops it, `HoldExpiring`, once the system clock says the hold's guarantee is near its
/// end (about 2.7 s), long before the monotonic clock would (about 53 s) and before the work
/// ends. The system-clock instant the scope stops at comes from the grant: its lock actor reads
/// the system clock as it grants, less the time since the call was sent; without it (or with
/// it made wrong) the work runs its 40 s. With a true clock, a scope of the same lease runs 3 s of the same
/// work to its end (the stop is the clock's, not the lease's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_running_ahead_stops_a_scope_the_monotonic_clock_would_not() {
    let server = RedisServer::start();
    let mut child = SkewedChild::spawn(
        "child_scopes_work_under_a_fast_wall_clock",
        (CHILD_URL, &server.url()),
        "+0 x20",
    );
    let line = child.expect_line("SCOPE ", Duration::from_secs(60));
    let (ended, ms) = line.split_once(' ').expect("SCOPE <how> <ms>");
    let ms: u64 = ms.parse().unwrap();
    assert_eq!(ended, "expiring", "the fast wall clock's scope: {line}");
    assert!(
        ms < 35_000,
        "stopped by the system clock, not at the work's end nor the monotonic stop: {ms} ms"
    );
    assert!(child.wait());

    let (ended, _) = scoped_hold(server.url(), Duration::from_secs(3)).await;
    assert_eq!(
        ended, "done",
        "a true clock's scope runs its work to the end"
    );
}
