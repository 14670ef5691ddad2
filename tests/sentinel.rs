//! Sentinel: lockman finds the primary through the sentinels and follows it through a failover,
//! first one forced with `SENTINEL FAILOVER`, then one after the primary dies. After each, new
//! acquires succeed on the new primary, waiters wake there, held locks are renewed there, and a
//! hold whose key did not reach it is reported lost through its guard. The sentinels and the
//! data servers each ask for a password of their own.

mod support;

use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockGuard, LockManager};
use redis::AsyncCommands;
use support::sentinel::{DATA_PASSWORD, MASTER, SentinelGroup};

/// Longer than a failover here (down after 1 s, then agreement and promotion), so that a hold
/// whose key is on the new primary survives the gap in renewals.
const WATCHDOG: Duration = Duration::from_secs(6);

/// The sentinels' password is in their URLs; the primary's is given apart.
fn config(group: &SentinelGroup) -> Config {
    Config::sentinel(MASTER, group.sentinel_urls())
        .master_auth(None, DATA_PASSWORD)
        .watchdog_timeout(WATCHDOG)
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
}

/// Acquires `name` as soon as the manager's commands reach a primary that takes writes.
async fn acquire_soon(mgr: &LockManager, name: &str) -> LockGuard {
    let deadline = Instant::now() + Duration::from_secs(15);
    let lock = mgr.lock(name);
    loop {
        match lock.try_acquire().await {
            Ok(Some(guard)) => return guard,
            Ok(None) => panic!("{name} is free"),
            Err(e) => {
                assert!(e.is_retryable(), "{name}: {e:?}");
                assert!(Instant::now() < deadline, "{name}: still failing: {e:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn conn_to(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://:{DATA_PASSWORD}@127.0.0.1:{port}/0"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_moves_acquires_waiters_and_renewals_to_the_new_primary() {
    let mut group = SentinelGroup::start();
    let a = LockManager::start(config(&group))
        .await
        .expect("start via sentinel");
    let b = LockManager::start(config(&group))
        .await
        .expect("start via sentinel");
    let first = group.primary_port();
    let kept = a.lock("kept").acquire().await.unwrap();
    assert!(
        conn_to(first)
            .await
            .exists::<_, bool>("kept")
            .await
            .unwrap()
    );

    // ---- A forced failover, with a hold and a waiter in place.
    // A lease far past the 4 s bound below: the waiter's own retry (at the lock's TTL) cannot
    // be what wakes it, only the unlock message on the new primary can.
    let held = a
        .lock("wake")
        .acquire_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let waiter = b.lock("wake");
    let waiting = tokio::spawn(async move { waiter.acquire().await });
    let mut on_first = redis::Client::open(format!("redis://:{DATA_PASSWORD}@127.0.0.1:{first}/0"))
        .unwrap()
        .get_connection()
        .unwrap();
    assert!(
        support::wait::subscribed(
            &mut on_first,
            "redisson_lock__channel:{wake}",
            Duration::from_secs(5)
        )
        .await,
        "the waiter waits on the first primary"
    );
    // The kit's switch-over (SENTINEL FAILOVER) returns once the old primary is demoted: until
    // then it still takes writes, which its demotion then loses (Redis's window, for every
    // client: a hold taken there is reported lost afterwards).
    let second = group.failover().expect("a switch-over");

    // New acquires succeed, on the new primary, from both managers.
    let fresh_a = acquire_soon(&a, "fresh:a").await;
    let fresh_b = acquire_soon(&b, "fresh:b").await;
    let mut on_second = conn_to(second).await;
    let holder: Vec<String> = on_second.hkeys("fresh:b").await.unwrap();
    assert_eq!(holder, vec![fresh_b.holder_id().to_owned()]);
    fresh_a.release().await.unwrap();
    fresh_b.release().await.unwrap();

    // The waiter subscribed again on the new primary: a release there wakes it at once.
    let mut probe_second =
        redis::Client::open(format!("redis://:{DATA_PASSWORD}@127.0.0.1:{second}/0"))
            .unwrap()
            .get_connection()
            .unwrap();
    assert!(
        support::wait::subscribed(
            &mut probe_second,
            "redisson_lock__channel:{wake}",
            support::wait::LIMIT
        )
        .await,
        "the waiter waits on the new primary"
    );
    assert!(
        !waiting.is_finished(),
        "the waiter must still wait: A holds the lock"
    );
    let released = Instant::now();
    held.release().await.expect("release on the new primary");
    let woken = support::wait::woken(waiting, Duration::from_secs(4)).await;
    assert!(released.elapsed() < Duration::from_secs(4));
    let holder: Vec<String> = on_second.hkeys("wake").await.unwrap();
    assert_eq!(holder, vec![woken.holder_id().to_owned()]);
    woken.release().await.unwrap();

    // The watchdog renews the held lock on the new primary.
    tokio::time::sleep(WATCHDOG / 2).await;
    assert!(!kept.is_lost());
    let ttl: i64 = on_second.pttl("kept").await.unwrap();
    assert!(
        ttl > (WATCHDOG / 3).as_millis() as i64,
        "kept renewed on the new primary: {ttl}"
    );

    // ---- The primary dies; one hold's key never reached the replica that takes over.
    let doomed = a.lock("doomed").acquire().await.unwrap();
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(2000)
        .query_async(&mut on_second)
        .await
        .unwrap();
    assert_eq!(acked, 1, "the replica has every hold so far");
    {
        // The replica forgets `doomed` (as if its write had not been replicated in time).
        let mut replica = support::raw(group.server(first));
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("replica-read-only")
            .arg("no")
            .query(&mut replica)
            .unwrap();
        let _: () = redis::cmd("DEL").arg("doomed").query(&mut replica).unwrap();
    }
    // The kit's crash of the primary (SIGKILL), back once the sentinels promoted the replica.
    let third = group.kill_primary().expect("a failover after the crash");
    assert_eq!(third, first);

    // The lost hold is reported through its guard, the kept one is not.
    tokio::time::timeout(Duration::from_secs(10), doomed.lost())
        .await
        .expect("a hold missing on the new primary is reported lost");
    assert!(doomed.is_lost());
    let fresh = acquire_soon(&b, "after:kill").await;
    let mut on_third = conn_to(third).await;
    assert!(on_third.exists::<_, bool>("after:kill").await.unwrap());
    assert!(!kept.is_lost(), "a hold whose key survived is kept");
    let count: u32 = on_third.hget("kept", kept.holder_id()).await.unwrap();
    assert_eq!(count, 1);
    fresh.release().await.unwrap();
    kept.release().await.unwrap();
    assert!(!on_third.exists::<_, bool>("kept").await.unwrap());
    a.shutdown().await;
    b.shutdown().await;
}

/// A group that lost its quorum (two of three sentinels gone) cannot replace a dead primary:
/// nothing promotes a replica. Waiters give up at their deadline with a retryable error or
/// no guard, never hang, and a manager starting then fails within its connect timeout with a
/// typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_without_quorum_fails_clearly_and_nobody_hangs() {
    let mut group = SentinelGroup::start();
    let mgr = LockManager::start(config(&group))
        .await
        .expect("start via sentinel");
    let held = acquire_soon(&mgr, "no-quorum").await;
    held.release().await.unwrap();
    group.kill_sentinel(1);
    group.kill_sentinel(2);
    let primary = group.primary_port();
    group.server(primary).stop();

    let lock = mgr.lock("no-quorum");
    for _ in 0..3 {
        let started = Instant::now();
        let attempt = tokio::time::timeout(
            Duration::from_secs(10),
            lock.try_acquire_for(Duration::from_secs(2)),
        )
        .await
        .expect("a bounded wait returns, with the primary gone and no failover");
        // No primary is an outage, never contention (issue 57).
        match attempt {
            Ok(None) => panic!("no primary answered as a holder"),
            Ok(Some(_)) => panic!("acquired with no primary"),
            Err(e) => assert!(
                e.is_retryable() && matches!(e, lockman::LockError::Unavailable { .. }),
                "{e:?}"
            ),
        }
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "{:?}",
            started.elapsed()
        );
    }
    // Still no primary: no replica was promoted.
    assert_eq!(group.primary_port(), primary);

    let started = Instant::now();
    let err = LockManager::start(config(&group).connect_timeout(Duration::from_secs(1)))
        .await
        .expect_err("no primary to start on");
    assert!(err.is_retryable(), "{err:?}");
    assert!(
        matches!(
            err,
            lockman::LockError::Connect { .. } | lockman::LockError::Timeout { .. }
        ),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    mgr.shutdown().await;
}

/// Whether a client of `conn`'s server is held by `CLIENT PAUSE` on an `EVALSHA` (the start's
/// permission probe, the only script a starting manager runs): postponed, flag `b`.
fn probe_paused(conn: &mut redis::Connection) -> bool {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(conn).unwrap();
    list.lines().any(|client| {
        let field = |name: &str| {
            client
                .split(' ')
                .find_map(|f| f.strip_prefix(name))
                .unwrap_or("")
                .to_owned()
        };
        field("cmd=") == "evalsha" && field("flags=").contains('b')
    })
}

/// How many commands `conn`'s server refused with `READONLY` (`INFO errorstats`).
fn readonly_errors(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("errorstats").query(conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("errorstat_READONLY:count="))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// A manager starting while its primary is demoted: Sentinel named the server and redis-rs saw
/// it answer `ROLE` as the master, then (the start's writes held by `CLIENT PAUSE WRITE`, so the
/// order is certain) it became a replica before the start's permission probe ran. The probe is
/// refused (`READONLY`); the start asks Sentinel again, and once the server is the primary again
/// (Sentinel names it, `ROLE` says master) it probes it and starts. Before, it failed with
/// `LockError::ReadOnly`, which says the URL names a replica: with Sentinel no URL does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_whose_primary_is_demoted_before_its_probe_asks_sentinel_again() {
    let group = SentinelGroup::start();
    let primary = group.primary_port();
    let mut raw = SentinelGroup::data_conn(primary).expect("the primary");
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(60_000)
        .arg("WRITE")
        .exec(&mut raw)
        .unwrap();
    // The probe is held until the unpause below: no response timeout may end it first.
    let config = config(&group)
        .connect_timeout(Duration::from_secs(20))
        .response_timeout(Duration::from_secs(30));
    let start = tokio::spawn(LockManager::start(config));
    support::wait::until("the start's probe is paused", || probe_paused(&mut raw)).await;
    // Demoted (a replica of a port nobody listens on: no sync, nothing flushed), then the
    // probe runs.
    let nobody = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(nobody)
        .exec(&mut raw)
        .unwrap();
    redis::cmd("CLIENT").arg("UNPAUSE").exec(&mut raw).unwrap();
    support::wait::until("the probe was refused as a replica's", || {
        readonly_errors(&mut raw) >= 1
    })
    .await;
    assert!(!start.is_finished(), "the start ended at a READONLY probe");
    redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .exec(&mut raw)
        .unwrap();
    let mgr = tokio::time::timeout(Duration::from_secs(30), start)
        .await
        .expect("the start ends")
        .unwrap()
        .expect("the manager starts on the primary Sentinel names again");
    let guard = mgr.lock("after").acquire().await.unwrap();
    let mut conn = conn_to(primary).await;
    assert!(conn.exists::<_, bool>("after").await.unwrap());
    guard.release().await.unwrap();
    mgr.shutdown().await;
}

/// Idle names taken and released in a loop while the primary switches over, then while it dies:
/// the pair's short path (an idle name's request straight to its attempt, its release past the
/// queue) meets each failover mid-flight. Every call ends within the response and connect
/// timeouts with a guard or a retryable error, never `Ok(None)` (nobody else holds these
/// names: an outage is not contention), and a release either releases, fails retryably or
/// reports the hold lost (`NotHeld`: taken on the old primary in the switch-over's last
/// moments, which its demotion lost); pairs succeed again on the new primary; and no name is
/// left held there once the loops end (a release whose reply never came is sent again until
/// Redis answers; a release the failover lost ends within the watchdog timeout, nobody
/// renewing its hold).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_names_taken_in_a_loop_through_a_switch_over_and_a_crash() {
    let mut group = SentinelGroup::start();
    let mgr = LockManager::start(config(&group))
        .await
        .expect("start via sentinel");
    let second = pairs_through(&mgr, "switch", || group.failover().expect("a switch-over")).await;
    no_pair_held(second, "switch").await;
    let third = pairs_through(&mgr, "crash", || {
        group.kill_primary().expect("a failover after the crash")
    })
    .await;
    no_pair_held(third, "crash").await;
    mgr.shutdown().await;
}

/// Loops of pairs on idle names `{phase}:0..4` from before `fault` until 20 pairs each after
/// it returned (the new primary's port); see the test above for what each call must give.
async fn pairs_through(mgr: &LockManager, phase: &str, fault: impl FnOnce() -> u16) -> u16 {
    use std::sync::atomic::{AtomicBool, Ordering};
    /// Far above one call's bounds (1 s connect, 1 s response, one resend).
    const CALL: Duration = Duration::from_secs(10);
    let faulted = std::sync::Arc::new(AtomicBool::new(false));
    let mut loops = Vec::new();
    for task in 0..4 {
        let name = format!("{phase}:{task}");
        let lock = mgr.lock(&name);
        let faulted = faulted.clone();
        loops.push(tokio::spawn(async move {
            let (mut before, mut after, mut errors, mut lost) = (0u32, 0u32, 0u32, 0u32);
            let deadline = Instant::now() + Duration::from_secs(60);
            while after < 20 {
                assert!(Instant::now() < deadline, "{name}: no 20 pairs after");
                let once = faulted.load(Ordering::SeqCst);
                let taken = tokio::time::timeout(CALL, lock.try_acquire())
                    .await
                    .unwrap_or_else(|_| panic!("{name}: try_acquire hung"));
                let guard = match taken {
                    Ok(Some(guard)) => guard,
                    Ok(None) => panic!("{name}: an idle name answered as taken"),
                    Err(e) => {
                        assert!(e.is_retryable(), "{name}: {e:?}");
                        errors += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                let released = tokio::time::timeout(CALL, guard.release())
                    .await
                    .unwrap_or_else(|_| panic!("{name}: release hung"));
                match released {
                    Ok(()) if once => after += 1,
                    Ok(()) => before += 1,
                    // A hold taken on the old primary in the switch-over's last moments, which
                    // its demotion lost: reported as lost, never as released.
                    Err(LockError::NotHeld { .. }) => lost += 1,
                    Err(e) => {
                        assert!(e.is_retryable(), "{name}: release: {e:?}");
                        errors += 1;
                    }
                }
            }
            eprintln!("{name}: {before} pairs before, {errors} retryable errors, {lost} lost");
            assert!(before > 0, "{name}: no pair before the fault");
        }));
    }
    // Pairs run on the old primary before the fault.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let primary = fault();
    faulted.store(true, Ordering::SeqCst);
    for running in loops {
        running.await.expect("a pair loop");
    }
    primary
}

/// No `{phase}:*` key on the primary on `port` within the watchdog timeout and a margin.
async fn no_pair_held(port: u16, phase: &str) {
    let mut conn = conn_to(port).await;
    let deadline = Instant::now() + WATCHDOG + Duration::from_secs(5);
    loop {
        let held: Vec<String> = conn.keys(format!("{phase}:*")).await.unwrap();
        if held.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "still held: {held:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
