//! The watchdog: renewal while held, batched renewal, lost locks reported, shutdown.

mod support;

use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockManager};
use redis::Commands;
use support::{
    RedisServer, commands::command_calls, commands::load_scripts, commands::reset_stats,
    wait::eventually,
};

const WATCHDOG: Duration = Duration::from_millis(600);

async fn manager(server: &RedisServer) -> LockManager {
    let config = Config::new(server.url()).watchdog_timeout(WATCHDOG);
    LockManager::start(config).await.expect("manager starts")
}

#[tokio::test]
async fn a_lock_without_lease_stays_held_past_several_timeouts() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.lock("kept");
    let guard = lock.acquire().await.unwrap();
    tokio::time::sleep(WATCHDOG * 4).await;
    assert!(lock.is_held().await.unwrap());
    let ttl: i64 = raw.pttl("kept").unwrap();
    assert!(ttl > 0 && ttl <= WATCHDOG.as_millis() as i64, "PTTL {ttl}");
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_lease_lock_is_never_renewed() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.lock("leased");
    let started = Instant::now();
    let guard = lock
        .acquire_with_lease(Duration::from_millis(900))
        .await
        .unwrap();
    // Ticks at 200, 400, 600, 800 ms renew nothing: the key expires on time.
    assert!(
        eventually(Duration::from_secs(2), || raw.exists::<_, bool>("leased")
            == Ok(false))
        .await
    );
    let gone = started.elapsed();
    assert!(
        gone >= Duration::from_millis(890),
        "expired early, after {gone:?}"
    );
    assert!(
        gone <= Duration::from_millis(1100),
        "expired late, after {gone:?}"
    );
    guard.lost().await;
    assert!(guard.is_lost());
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotHeld { .. })
    ));
}

#[tokio::test]
async fn renewal_is_batched_a_hundred_locks_per_round_trip() {
    const LOCKS: usize = 250;
    let server = RedisServer::start();
    let mut raw = server.conn();
    // Renewal calls only: the watch's checks (one per renewal call, tests/loss.rs) are off.
    let config = Config::new(server.url())
        .watchdog_timeout(Duration::from_millis(900))
        .watch_holds(false);
    let mgr = LockManager::start(config).await.unwrap();
    let mut guards = Vec::new();
    for i in 0..LOCKS {
        guards.push(mgr.lock(format!("batch:{i}")).acquire().await.unwrap());
    }
    // Each hold goes to the watchdog once it has lived a sixth of the timeout (150 ms): counted
    // from the first renewals on, over five ticks' worth of them however long the machine takes.
    reset_stats(&mut raw);
    support::wait::calls_reach(&mut raw, "pexpire", 1).await;
    reset_stats(&mut raw);
    support::wait::calls_reach(&mut raw, "pexpire", 5 * LOCKS as u64).await;
    // Less the client record's writes (one ZADD each; docs/protocol.md, "Client records").
    let calls = command_calls(&mut raw, "evalsha") - command_calls(&mut raw, "zadd");
    let pexpires = command_calls(&mut raw, "pexpire");
    // 3 script calls per tick (100 + 100 + 50 locks). The counts may start and end inside a
    // tick (the reset and the reads land between its calls), but every call renews at least 50
    // locks, full ticks or not; one call per lock renews 1 per call, 10 per call 10.
    assert!(
        calls > 0 && pexpires >= 50 * calls,
        "{calls} renewal calls for {pexpires} renewals"
    );
    // Every lock renewed at each tick: all 250 are still held, three 900 ms timeouts on.
    for i in 0..LOCKS {
        let ttl: i64 = raw.pttl(format!("batch:{i}")).unwrap();
        assert!(ttl > 0, "batch:{i} is still held");
    }
    drop(guards);
}

#[tokio::test]
async fn short_holds_cost_the_watchdog_nothing() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let config = Config::new(server.url()).watchdog_timeout(Duration::from_millis(900));
    let mgr = LockManager::start(config).await.unwrap();
    let lock = mgr.lock("short");
    load_scripts(&lock).await;
    // The client record's first write (after a third of the timeout) loads its script.
    let record = format!("lockman_client:{{lockman}}:{}", mgr.client_id());
    assert!(support::wait::eventually_blocking(
        Duration::from_secs(5),
        || raw.exists(&record).unwrap()
    ));
    reset_stats(&mut raw);
    let start = Instant::now();
    let mut holds = 0u64;
    // Renewals a stretched hold may have earned: a loaded machine can stretch a 10 ms hold
    // past the 150 ms after which the watchdog renews it (then at each 300 ms tick). Zero
    // unless that happened; the count is exact either way.
    let mut earned = 0u64;
    // Held 10 ms of every ~11: over 4 ticks of 300 ms, most ticks find a hold. None lives the
    // 150 ms after which the watchdog would renew it, so no tick renews any; nor the 20 ms
    // after which the watch would check it.
    while start.elapsed() < Duration::from_millis(1_200) {
        let asked = Instant::now();
        let guard = lock.acquire().await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        guard.release().await.unwrap();
        let lived = asked.elapsed();
        if lived >= Duration::from_millis(150) {
            earned += 1 + (lived.as_millis() / 300) as u64;
        }
        // With the watch (on by default) a hold that lives 20 ms is handed to the watchdog and
        // checked once on its tracking connection (BENCHMARKS.md, "Holds watched from their
        // grant"): a loaded machine can stretch a 10 ms hold that far.
        if lived >= Duration::from_millis(20) {
            earned += 1;
        }
        holds += 1;
    }
    // Besides the client record's write each tick (one ZADD each; docs/protocol.md, "Client
    // records").
    let scripts = command_calls(&mut raw, "evalsha") - command_calls(&mut raw, "zadd");
    let renewals = scripts as i64 - 2 * holds as i64;
    assert!(
        (0..=earned as i64).contains(&renewals),
        "{renewals} renewals besides the acquires and releases of {holds} holds \
         ({earned} earned by holds a stall stretched)"
    );
    // A hold that lives on is renewed: unrenewed, its 900 ms lease would be over.
    let guard = lock.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!guard.is_lost());
    let ttl: i64 = raw.pttl("short").unwrap();
    assert!(ttl > 0, "renewed: PTTL {ttl} ms");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_deleted_lock_is_reported_lost_and_no_longer_renewed() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    // A 3 s timeout (ticks of 1 s): the hold reaches the watchdog after 500 ms and the next
    // tick finds it gone, by 1.5 s; a loss found only when renewals fail for a whole timeout
    // takes 3 s. 2.2 s between them leaves a loaded machine 700 ms.
    let watchdog = Duration::from_secs(3);
    let config = Config::new(server.url()).watchdog_timeout(watchdog);
    let mgr = LockManager::start(config).await.expect("manager starts");
    let guard = mgr.lock("deleted").acquire().await.unwrap();
    let _: () = raw.del("deleted").unwrap();
    let deleted = Instant::now();
    tokio::time::timeout(watchdog, guard.lost())
        .await
        .expect("lost within one renewal interval");
    assert!(
        deleted.elapsed() <= Duration::from_millis(2_200),
        "{:?}",
        deleted.elapsed()
    );
    assert!(guard.is_lost());
    // Someone else takes it; the lost holder's renewals must not touch the new hold.
    let other = mgr.lock("deleted");
    let _g = other
        .acquire_with_lease(Duration::from_secs(10))
        .await
        .unwrap();
    tokio::time::sleep(watchdog / 2).await;
    let ttl: i64 = raw.pttl("deleted").unwrap();
    // A stale renewal would have set it to the 3 s timeout.
    assert!(
        ttl > 5_000,
        "the new lease was not overwritten by a stale renewal: {ttl}"
    );
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotHeld { .. })
    ));
}

#[tokio::test]
async fn a_force_unlocked_lock_is_reported_lost() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let lock = mgr.lock("forced");
    let guard = lock.acquire().await.unwrap();
    assert!(mgr.lock("forced").force_unlock().await.unwrap());
    tokio::time::timeout(WATCHDOG, guard.lost())
        .await
        .expect("lost at the next renewal");
}

#[tokio::test]
async fn a_stale_guard_cannot_release_a_later_hold_of_the_same_holder() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let lock = mgr.lock("stale");
    let old = lock
        .acquire_with_lease(Duration::from_millis(100))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let new = lock.acquire().await.unwrap();
    assert!(matches!(
        old.release().await,
        Err(LockError::NotHeld { .. })
    ));
    assert_eq!(
        lock.hold_count().await.unwrap(),
        1,
        "the new hold is intact"
    );
    new.release().await.unwrap();
}

#[tokio::test]
async fn shutdown_releases_held_locks_and_fails_waiters() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let other = manager(&server).await;
    let lock = mgr.lock("down");
    let g1 = lock.acquire().await.unwrap();
    let _g2 = lock.acquire().await.unwrap();
    let held = other.lock("elsewhere").acquire().await.unwrap();
    let waiter = {
        let lock = mgr.lock("elsewhere");
        tokio::spawn(async move { lock.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    mgr.shutdown().await;
    let exists: bool = raw.exists("down").unwrap();
    assert!(!exists, "both holds released at shutdown");
    let waited = tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(waited, Err(LockError::Shutdown)), "{waited:?}");
    assert!(matches!(
        mgr.lock("down").try_acquire().await,
        Err(LockError::Shutdown)
    ));
    assert!(g1.is_lost());
    assert!(matches!(g1.release().await, Err(LockError::Shutdown)));
    held.release().await.unwrap();
}

#[tokio::test]
async fn dropping_the_manager_stops_renewal_and_the_lock_expires() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.lock("abandoned");
    // A guard taken with the message API does not keep the manager alive (one from
    // `Lock::acquire` does); forgotten, it never releases.
    let actor = mgr.lock_actor("abandoned").await.unwrap();
    let acquire = lockman::actix::Acquire {
        holder: lock.holder_id().into(),
        lease: None,
        wait: lockman::actix::Wait::No,
        kind: lockman::LockKind::Reentrant,
        owner: Some(lockman::deadlock::current()),
        site: Some(lockman::deadlock::site()),
    };
    std::mem::forget(actor.send(acquire).await.unwrap().unwrap().unwrap());
    drop((actor, lock));
    drop(mgr);
    let dropped = Instant::now();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let exists: bool = raw.exists("abandoned").unwrap();
    assert!(exists, "not released by the drop");
    assert!(
        eventually(WATCHDOG * 2, || raw.exists::<_, bool>("abandoned")
            == Ok(false))
        .await
    );
    assert!(
        dropped.elapsed() <= WATCHDOG + Duration::from_millis(200),
        "{:?}",
        dropped.elapsed()
    );
}

/// How many times Redis refused this user access to `key` (ACL LOG: each refused command is
/// counted in its entry, by reason and object).
fn refusals(conn: &mut redis::Connection, key: &str) -> u64 {
    let entries: Vec<redis::Value> = redis::cmd("ACL").arg("LOG").query(conn).unwrap();
    let mut refused = 0;
    for entry in entries {
        let fields: std::collections::HashMap<String, redis::Value> =
            redis::from_redis_value(entry).unwrap();
        let text = |name: &str| {
            fields
                .get(name)
                .and_then(|v| redis::from_redis_value::<String>(v.clone()).ok())
        };
        if text("object").as_deref() == Some(key) {
            refused += fields
                .get("count")
                .and_then(|v| redis::from_redis_value::<u64>(v.clone()).ok())
                .unwrap_or(0);
        }
    }
    refused
}

/// A renewal that fails is retried within the hold's deadline, promptly and batched, not at
/// the next tick nor a quarter of an interval later; once Redis takes it again the hold is
/// confirmed long before the next regular tick. Here every renewal fails at once (the user
/// loses access to the lock's key, its client record's keys kept), so each attempt is one
/// refusal in Redis's ACL LOG.
#[tokio::test]
async fn a_failed_renewal_is_retried_promptly_within_the_deadline() {
    // A renewal every 4 s; the old retry came a quarter of that (1 s) after a failure.
    let watchdog = Duration::from_secs(12);
    let server = RedisServer::start();
    let mut raw = server.conn();
    let config = Config::new(server.url())
        .watchdog_timeout(watchdog)
        .response_timeout(Duration::from_millis(300));
    let mgr = LockManager::start(config).await.unwrap();
    let guard = mgr.lock("retried").acquire().await.unwrap();
    let granted = guard.valid_until();
    // The watch (Config::watch_holds) checks the hold on its tracking connection soon after the
    // grant: that read of the key happens before the access is taken away, so that every
    // refusal counted below is a renewal's.
    let tracked = |conn: &mut redis::Connection| {
        let info: String = redis::cmd("INFO").arg("stats").query(conn).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("tracking_total_keys:"))
            .is_some_and(|n| n.trim() != "0")
    };
    assert!(
        support::wait::eventually_blocking(Duration::from_secs(2), || tracked(&mut raw)),
        "the hold was never checked by the watch"
    );
    let acl = |rule: &str, conn: &mut redis::Connection| {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("default")
            .arg("resetkeys")
            .arg(rule)
            .query::<()>(conn)
            .unwrap()
    };
    acl("~lockman_client:*", &mut raw);
    // The first tick (4 s after the manager started) fails.
    let mut failed = false;
    for _ in 0..1000 {
        if refusals(&mut raw, "retried") > 0 {
            failed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(failed, "no renewal was refused");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let attempts = refusals(&mut raw, "retried");
    acl("allkeys", &mut raw);
    // The tick's call and its retries after 25, 75, 175 and 375 ms; the old code tried once
    // more only 1 s after the failure.
    assert!(attempts >= 3, "{attempts} renewal attempts in 600 ms");
    assert!(
        attempts < 40,
        "{attempts} renewal attempts in 600 ms: no backoff"
    );
    // Confirmed again within a retry gap (500 ms), well before the next tick (4 s on).
    assert!(
        eventually(Duration::from_secs(2), || guard.valid_until() > granted).await,
        "not renewed after Redis took renewals again"
    );
    assert!(!guard.is_lost());
    let pttl: i64 = raw.pttl("retried").unwrap();
    assert!(
        pttl > (watchdog - Duration::from_secs(3)).as_millis() as i64,
        "PTTL {pttl}"
    );
    guard.release().await.unwrap();
}
