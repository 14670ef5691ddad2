//! Idle lock actors linger: a name used again soon finds its actor instead of starting a new one
//! (`Config::idle_linger`), at most `Config::max_lingering` of them per manager, and they leave
//! once the linger has passed, timers and all.

mod support;

use std::time::{Duration, Instant};

use lockman::{Config, LockManager};
use support::RedisServer;

async fn manager(server: &RedisServer, linger: Duration, max: usize) -> LockManager {
    let config = Config::new(server.url())
        .idle_linger(linger)
        .max_lingering(max);
    LockManager::start(config).await.expect("manager starts")
}

/// How many lock actors live, once that is `want` or 5 s have passed (actors stop on their
/// own threads: the count reaches its value a moment after the release that set it going).
/// The tests that use it linger 3 s, so a count that overshoots to `want` on its way down
/// (lingering actors leaving) cannot come within that time.
async fn live_becomes(mgr: &LockManager, want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let live = mgr.live_lock_actors().await;
        if live == want || Instant::now() >= deadline {
            return live;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_name_idle_between_pairs_keeps_its_actor_then_it_leaves() {
    let server = RedisServer::start();
    // 1 s: a loaded machine's pause between two pairs stays well inside it, and two lingers
    // plus the slack below (3.5 s) still end before the 5 s tick that the test tells apart.
    let linger = Duration::from_secs(1);
    let mgr = manager(&server, linger, 100).await;
    let lock = mgr.lock("idle-between");
    lock.acquire().await.unwrap().release().await.unwrap();
    // The actor that served the first pair, held weakly: it upgrades only while that very actor
    // runs, so a stop and a fresh start in between would show.
    let first = mgr.lock_actor("idle-between").await.unwrap().downgrade();
    for _ in 0..10 {
        // Idle between pairs, as a request handler's lock is (a tenth of the linger).
        tokio::time::sleep(linger / 10).await;
        let guard = lock.acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    tokio::time::sleep(linger / 10).await;
    assert!(
        first.upgrade().is_some(),
        "the same actor served every pair: it lingered while idle"
    );
    assert_eq!(mgr.live_lock_actors().await, 1, "lingering, not gone");
    // The watchdog holds above left the hand-over tick armed (a sixth of 30 s): leaving cancels
    // it, so the actor stops within two lingers, not when the tick fires.
    let started = Instant::now();
    assert!(
        support::wait::eventually(Duration::from_secs(10), || first.upgrade().is_none()).await,
        "the idle actor left"
    );
    assert!(
        started.elapsed() < 2 * linger + Duration::from_millis(1500),
        "left after about two lingers, not at the 5 s tick: {:?}",
        started.elapsed()
    );
    assert_eq!(mgr.live_lock_actors().await, 0);
    // A name used after its actor left gets a new one, and works.
    assert!(lock.try_acquire().await.unwrap().is_some());
}

#[tokio::test]
async fn at_most_max_lingering_idle_actors_stay() {
    let server = RedisServer::start();
    let linger = Duration::from_secs(3);
    let mgr = manager(&server, linger, 2).await;
    for n in 0..6 {
        let lock = mgr.lock(format!("many-{n}"));
        lock.acquire().await.unwrap().release().await.unwrap();
    }
    // Well within the linger: the first two idle actors took both places, the other four left.
    let live = live_becomes(&mgr, 2).await;
    assert_eq!(live, 2, "two linger, the rest stopped at once");
    // A lingering actor that is used again gives its place back while busy.
    let busy = mgr.lock("many-0").acquire().await.unwrap();
    let lock = mgr.lock("many-5");
    lock.acquire().await.unwrap().release().await.unwrap();
    assert_eq!(
        live_becomes(&mgr, 3).await,
        3,
        "many-0 busy, many-1 and many-5 lingering"
    );
    busy.release().await.unwrap();
    assert_eq!(
        live_becomes(&mgr, 2).await,
        2,
        "many-0 found no free place once idle again, and left"
    );
    assert!(
        support::wait::lock_actors_stop(&mgr, 2 * linger).await,
        "all gone once the linger passed"
    );
}

#[tokio::test]
async fn handles_made_per_request_reach_the_lingering_actor_and_keep_none_alive() {
    let server = RedisServer::start();
    let linger = Duration::from_secs(1);
    let mgr = manager(&server, linger, 100).await;
    mgr.lock("per-request")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let first = mgr.lock_actor("per-request").await.unwrap().downgrade();
    for _ in 0..10 {
        // A handle per request, as a web handler makes one, the name idle in between: each
        // reaches the actor through the manager's directory (the shared address its grants
        // carry, noted there by the first).
        tokio::time::sleep(linger / 10).await;
        let guard = mgr.lock("per-request").acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    assert!(
        first.upgrade().is_some(),
        "every handle reached the actor that served the first"
    );
    // What the directory keeps of it is weak: the idle actor still leaves after its linger.
    assert_eq!(
        live_becomes(&mgr, 0).await,
        0,
        "gone once the linger passed"
    );
    mgr.lock("per-request")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert_eq!(
        mgr.live_lock_actors().await,
        1,
        "a new actor for the next request"
    );
}

#[tokio::test]
async fn without_a_linger_an_idle_actor_stops_at_once() {
    let server = RedisServer::start();
    let mgr = manager(&server, Duration::ZERO, 100).await;
    let lock = mgr.lock("no-linger");
    lock.acquire().await.unwrap().release().await.unwrap();
    let mut live = usize::MAX;
    for _ in 0..100 {
        live = mgr.live_lock_actors().await;
        if live == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(live, 0, "no linger: gone as soon as idle");
}

#[tokio::test]
async fn bad_linger_settings_are_refused() {
    let server = RedisServer::start();
    let err = LockManager::start(Config::new(server.url()).arbiters(0))
        .await
        .expect_err("zero arbiters");
    assert!(
        matches!(err, lockman::LockError::InvalidArgument { .. }),
        "{err:?}"
    );
    let err = LockManager::start(Config::new(server.url()).idle_linger(Duration::MAX))
        .await
        .expect_err("a linger past the longest expiry");
    assert!(
        matches!(err, lockman::LockError::InvalidArgument { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_semaphore_idle_between_uses_keeps_its_actor_then_it_leaves() {
    let server = RedisServer::start();
    // 1 s: a loaded machine's pause between two uses stays well inside it.
    let linger = Duration::from_secs(1);
    let mgr = manager(&server, linger, 100).await;
    let semaphore = mgr.semaphore("idle-permits");
    assert!(semaphore.try_set_permits(2).await.unwrap());
    let first = mgr
        .sync_actor(lockman::SyncKind::Semaphore, "idle-permits")
        .await
        .unwrap()
        .downgrade();
    for _ in 0..10 {
        tokio::time::sleep(linger / 10).await;
        drop(semaphore.acquire(1).await.unwrap());
    }
    tokio::time::sleep(linger / 10).await;
    assert!(first.upgrade().is_some(), "the same actor served every use");
    assert!(
        support::wait::eventually(Duration::from_secs(5), || first.upgrade().is_none()).await,
        "the idle actor left"
    );
}

/// A permit-semaphore waiter that gives up (its wait timed out, or its `acquire` dropped) while
/// every permit is another manager's leaves no actor behind: the actor goes a linger or two
/// after, not when the retry it had armed for the earliest permit to expire (a watchdog
/// timeout, 30 s, away) fires. That armed timer kept a departed actor alive 30 s.
#[tokio::test]
async fn a_permit_semaphore_waiter_that_gave_up_leaves_no_actor_behind() {
    let server = RedisServer::start();
    let mgr = manager(&server, Duration::from_millis(300), 100).await;
    let other = manager(&server, Duration::from_millis(300), 100).await;
    for (i, drop_it) in [false, true].into_iter().enumerate() {
        let name = format!("gave-up-{i}");
        let permits = mgr.permit_semaphore(&name);
        assert!(permits.try_set_permits(1).await.unwrap());
        let held = other.permit_semaphore(&name).acquire(1).await.unwrap();
        let actor = mgr
            .sync_actor(lockman::SyncKind::PermitSemaphore, &name)
            .await
            .unwrap()
            .downgrade();
        if drop_it {
            let waited = tokio::time::timeout(Duration::from_millis(200), permits.acquire(1));
            assert!(waited.await.is_err(), "no permit is free");
        } else {
            let waited = permits.try_acquire_for(1, Duration::from_millis(200)).await;
            assert!(waited.unwrap().is_none(), "no permit is free");
        }
        held.release().await.unwrap();
        let gave_up = Instant::now();
        assert!(
            support::wait::eventually(Duration::from_secs(5), || actor.upgrade().is_none()).await,
            "drop {drop_it}: the actor still lives {:?} after its waiter gave up",
            gave_up.elapsed()
        );
    }
}

/// A synchronizer's actor that waited (its channel subscribed, its route held by the pub/sub
/// actor from `Subscribe` to `Unsubscribe`) still leaves once idle: nobody waits any more, so it
/// unsubscribes, and the route it gave the pub/sub actor no longer keeps it alive.
#[tokio::test]
async fn a_semaphore_actor_that_waited_leaves_once_idle() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let linger = Duration::from_secs(1);
    let mgr = manager(&server, linger, 100).await;
    let sem = mgr.semaphore("waited-sem");
    assert!(sem.try_set_permits(1).await.unwrap());
    let first = sem.acquire(1).await.unwrap();
    let waiting = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire(1).await })
    };
    support::wait::subscribers(&mut raw, "redisson_sc:{waited-sem}", 1).await;
    first.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("woken by the release")
        .unwrap()
        .unwrap();
    second.release().await.unwrap();
    support::wait::until("the semaphore's channel unsubscribed", || {
        let (_, n): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("redisson_sc:{waited-sem}")
            .query(&mut raw)
            .unwrap();
        n == 0
    })
    .await;
    // Two lingers and slack: it left on its own, not kept by the pub/sub actor's route.
    assert_eq!(live_becomes(&mgr, 0).await, 0, "the semaphore's actor left");
}
