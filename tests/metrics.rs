//! The `metrics` feature: every metric's value after a known sequence of operations, read from a
//! recorder of the test's own: each test runs its body (an ignored test) in a process of its
//! own. Run with `cargo test --features metrics --test metrics`.
#![cfg(feature = "metrics")]

mod support;

use std::time::Duration;

use lockman::{Config, LockError, LockManager};
use redis::Commands;
use support::RedisServer;
use support::recorder::recorded;

/// Runs this binary's ignored test `body` in a process of its own, and fails when it fails.
/// The recorder is global to a process, and some asserted series have no label a test could
/// make its own (`lockman_renewal_failures_total`, the pub/sub reconnects): alone, every value
/// a body reads is its own, whatever the other tests of this binary do.
fn alone(body: &str) {
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            body,
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .expect("run the test body");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{body}:\n{stdout}\n{stderr}"
    );
}

fn value(key: &str) -> f64 {
    recorded()
        .values
        .lock()
        .unwrap()
        .get(key)
        .copied()
        .unwrap_or(0.0)
}

fn samples(key: &str) -> Vec<f64> {
    recorded()
        .samples
        .lock()
        .unwrap()
        .get(key)
        .cloned()
        .unwrap_or_default()
}

#[test]
fn every_metric_after_a_known_sequence() {
    alone("every_metric_after_a_known_sequence_alone");
}

#[tokio::test]
#[ignore = "run in a process of its own by every_metric_after_a_known_sequence"]
async fn every_metric_after_a_known_sequence_alone() {
    recorded();
    let server = RedisServer::start();
    let mut raw = server.conn();
    let config = Config::new(server.url()).watchdog_timeout(Duration::from_millis(300));
    let mgr = LockManager::start(config).await.unwrap();

    // Acquired, then a second holder times out after 100 ms.
    let asked = std::time::Instant::now();
    let guard = mgr.lock("a").acquire().await.unwrap();
    let took = asked.elapsed().as_secs_f64();
    assert_eq!(value("lockman_holds{kind=lock}"), 1.0);
    assert!(
        mgr.lock("a")
            .try_acquire_for(Duration::from_millis(100))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        value("lockman_acquire_total{kind=lock,outcome=acquired}"),
        1.0
    );
    assert_eq!(
        value("lockman_acquire_total{kind=lock,outcome=timed_out}"),
        1.0
    );
    let waits = samples("lockman_acquire_wait_seconds{kind=lock}");
    assert_eq!(waits.len(), 2, "{waits:?}");
    // The first acquire's wait is within the time its call took (however long a loaded
    // machine made that); the second waited its 100 ms.
    assert!(
        waits[0] <= took && waits[1] >= 0.099,
        "{waits:?}, took {took}"
    );

    // A waiter counts while it waits; the holder keeps the lock past a few renewals.
    let waiter = {
        let lock = mgr.lock("a");
        tokio::spawn(async move { lock.acquire().await.unwrap().release().await.unwrap() })
    };
    assert!(
        support::wait::eventually(Duration::from_secs(2), || value(
            "lockman_waiters{kind=lock}"
        ) == 1.0)
        .await
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    guard.release().await.unwrap();
    waiter.await.unwrap();
    assert_eq!(value("lockman_waiters{kind=lock}"), 0.0);
    assert_eq!(value("lockman_holds{kind=lock}"), 0.0);
    assert_eq!(
        value("lockman_acquire_total{kind=lock,outcome=acquired}"),
        2.0
    );
    assert!(value("lockman_renewal_calls_total") >= 1.0);
    assert!(value("lockman_renewals_total") >= 1.0);
    assert_eq!(value("lockman_renewal_failures_total"), 0.0);

    // Another kind has its own label.
    mgr.fair_lock("f")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert_eq!(
        value("lockman_acquire_total{kind=fair,outcome=acquired}"),
        1.0
    );
    assert_eq!(value("lockman_holds{kind=fair}"), 0.0);

    // The non-reentrant kinds too; a refused re-entry is a failure of that kind.
    for (kind, lock) in [
        ("non_reentrant", mgr.non_reentrant_lock("nr")),
        (
            "non_reentrant_fair",
            (*mgr.non_reentrant_fair_lock("nf")).clone(),
        ),
    ] {
        let held = lock.acquire().await.unwrap();
        let again = lock.try_acquire().await;
        assert!(
            matches!(again, Err(LockError::AlreadyHeld { .. })),
            "{again:?}"
        );
        assert_eq!(value(&format!("lockman_holds{{kind={kind}}}")), 1.0);
        held.release().await.unwrap();
        for (outcome, n) in [("acquired", 1.0), ("failed", 1.0)] {
            assert_eq!(
                value(&format!(
                    "lockman_acquire_total{{kind={kind},outcome={outcome}}}"
                )),
                n,
                "{kind} {outcome}"
            );
        }
    }

    // The spin lock: its own label.
    let spin = mgr.spin_lock("sp");
    let held = spin.acquire().await.unwrap();
    assert_eq!(value("lockman_holds{kind=spin}"), 1.0);
    held.release().await.unwrap();
    assert_eq!(value("lockman_holds{kind=spin}"), 0.0);
    assert_eq!(
        value("lockman_acquire_total{kind=spin,outcome=acquired}"),
        1.0
    );

    // A refusal from Redis is a failure.
    let _: () = raw.set("text", "not a lock").unwrap();
    let err = mgr.lock("text").try_acquire().await.unwrap_err();
    assert!(matches!(err, LockError::WrongType { .. }), "{err:?}");
    assert_eq!(
        value("lockman_acquire_total{kind=lock,outcome=failed}"),
        1.0
    );

    // Losses, by reason: a lease that ran out; a key deleted under the watchdog. A loss is
    // counted before the guard learns it: read as soon as the guard wakes, it is there.
    let leased = mgr
        .lock("l")
        .acquire_with_lease(Duration::from_millis(50))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(2), leased.lost())
        .await
        .expect("the lease ran out");
    assert_eq!(value("lockman_lost_total{kind=lock,reason=lease}"), 1.0);
    let watched = mgr.lock("w").acquire().await.unwrap();
    let _: () = raw.del("w").unwrap();
    tokio::time::timeout(Duration::from_secs(3), watched.lost())
        .await
        .expect("renewal found it gone");
    assert_eq!(value("lockman_lost_total{kind=lock,reason=watchdog}"), 1.0);
    assert_eq!(value("lockman_holds{kind=lock}"), 0.0);
    drop((leased, watched));

    // Every connection killed, of both types: the pub/sub one may still be subscribed to a
    // channel a waiter's grant kept (until the name's actor departs), and is then of type
    // pubsub, not normal. The pub/sub connection is opened again once.
    assert_eq!(value("lockman_reconnects_total{connection=pubsub}"), 0.0);
    support::commands::kill_clients(&mut raw, &["normal", "pubsub"]);
    assert!(
        support::wait::eventually(Duration::from_secs(5), || value(
            "lockman_reconnects_total{connection=pubsub}"
        ) == 1.0)
        .await
    );
    mgr.shutdown().await;
}

#[test]
fn synchronizer_metrics_count_permits_waits_and_losses() {
    alone("synchronizer_metrics_count_permits_waits_and_losses_alone");
}

#[tokio::test]
#[ignore = "run in a process of its own by synchronizer_metrics_count_permits_waits_and_losses"]
async fn synchronizer_metrics_count_permits_waits_and_losses_alone() {
    recorded();
    let server = RedisServer::start();
    let mut raw = server.conn();
    let config = Config::new(server.url()).watchdog_timeout(Duration::from_millis(600));
    let mgr = LockManager::start(config).await.unwrap();
    let sem = mgr.permit_semaphore("metered");
    assert!(sem.try_set_permits(2).await.unwrap());
    let two = sem.acquire(2).await.unwrap();
    assert_eq!(value("lockman_permits_held{kind=permit_semaphore}"), 2.0);
    assert!(
        sem.try_acquire_for(1, Duration::from_millis(50))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        value("lockman_sync_wait_total{kind=permit_semaphore,outcome=acquired}"),
        1.0
    );
    assert_eq!(
        value("lockman_sync_wait_total{kind=permit_semaphore,outcome=timed_out}"),
        1.0
    );
    assert_eq!(value("lockman_sync_waiters{kind=permit_semaphore}"), 0.0);
    // Reclaimed behind its back: renewal finds it gone.
    let _: () = redis::cmd("DEL")
        .arg("{metered}:timeout")
        .query(&mut raw)
        .unwrap();
    tokio::time::timeout(Duration::from_secs(3), two.lost())
        .await
        .expect("lost");
    // Counted before the guard was told.
    assert_eq!(
        value("lockman_permits_lost_total{kind=permit_semaphore,reason=watchdog}"),
        1.0
    );
    // Lost permits are held no more, before their guard gives them back (as a lost lock's
    // hold leaves lockman_holds at the loss).
    assert_eq!(value("lockman_permits_held{kind=permit_semaphore}"), 0.0);
    let _ = two.release().await;
    assert_eq!(value("lockman_permits_held{kind=permit_semaphore}"), 0.0);
    // A latch wait.
    let latch = mgr.count_down_latch("metered-latch");
    assert!(latch.wait_for(Duration::from_millis(10)).await.unwrap());
    assert_eq!(
        value("lockman_sync_wait_total{kind=count_down_latch,outcome=opened}"),
        1.0
    );
    mgr.shutdown().await;
}

#[test]
fn election_metrics_count_terms_won_resigned_and_lost() {
    alone("election_metrics_count_terms_won_resigned_and_lost_alone");
}

#[tokio::test]
#[ignore = "run in a process of its own by election_metrics_count_terms_won_resigned_and_lost"]
async fn election_metrics_count_terms_won_resigned_and_lost_alone() {
    recorded();
    let server = RedisServer::start();
    let mut raw = server.conn();
    let config = Config::new(server.url()).watchdog_timeout(Duration::from_millis(300));
    let mgr = LockManager::start(config).await.unwrap();
    let election = mgr.election("m-elect");
    let lead = election.campaign().await.unwrap();
    assert_eq!(value("lockman_leader{name=m-elect}"), 1.0);
    assert_eq!(value("lockman_terms_total{name=m-elect,outcome=won}"), 1.0);
    lead.resign().await.unwrap();
    assert_eq!(value("lockman_leader{name=m-elect}"), 0.0);
    assert_eq!(
        value("lockman_terms_total{name=m-elect,outcome=resigned}"),
        1.0
    );
    // A lead whose key is deleted is lost at the next renewal; its end counts as lost.
    let lead = election.campaign().await.unwrap();
    let _: () = raw.del("m-elect").unwrap();
    lead.lost().await;
    drop(lead);
    assert_eq!(value("lockman_leader{name=m-elect}"), 0.0);
    assert_eq!(value("lockman_terms_total{name=m-elect,outcome=won}"), 2.0);
    assert_eq!(value("lockman_terms_total{name=m-elect,outcome=lost}"), 1.0);
    mgr.shutdown().await;
}

#[test]
fn short_watched_holds_are_no_loss() {
    alone("short_watched_holds_are_no_loss_alone");
}

/// Holds watched from their grant, released about when they go to the watch (20 ms), alone and
/// handed off among waiters: each first check races its hold's release (the key deleted, or handed to another holder),
/// and none of them is a loss. (The break: a check that found the key its own release had
/// taken away reported the hold lost: `lockman_lost_total{reason=watchdog}` counted it, and
/// the holder's log warned "lock lost".)
#[tokio::test]
#[ignore = "run in a process of its own by short_watched_holds_are_no_loss"]
async fn short_watched_holds_are_no_loss_alone() {
    recorded();
    let server = RedisServer::start();
    let config = Config::new(server.url()).watchdog_timeout(Duration::from_secs(30));
    let mgr = LockManager::start(config).await.unwrap();
    let tasks = (0..32).map(|t| {
        let mgr = mgr.clone();
        tokio::spawn(async move {
            // Half the tasks on names of their own, half four to a name (hand-offs).
            let name = if t % 2 == 0 {
                format!("own:{t}")
            } else {
                format!("shared:{}", t % 4)
            };
            let lock = mgr.lock(name);
            for i in 0..20u64 {
                // About the 20 ms after which a hold goes to the watch: its check races the
                // release.
                let guard = lock.acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(18 + (i + t) % 5)).await;
                guard.release().await.unwrap();
            }
        })
    });
    for task in futures_util::future::join_all(tasks).await {
        task.unwrap();
    }
    // The checks still under way come back (their holds are gone by now).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let checked = value("lockman_watch_checks_total{found=held}")
        + value("lockman_watch_checks_total{found=lost}");
    assert!(checked > 0.0, "the holds were watched: {checked} checks");
    for reason in ["watchdog", "release", "unconfirmed"] {
        assert_eq!(
            value(&format!("lockman_lost_total{{kind=lock,reason={reason}}}")),
            0.0,
            "a released hold counted lost ({reason}); {checked} checks"
        );
    }
    mgr.shutdown().await;
}
