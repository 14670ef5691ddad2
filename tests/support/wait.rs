//! Waiting for a state instead of sleeping for a time: a test that orders events by a fixed
//! sleep and then asserts exact counts or an exact order fails on a loaded machine, where the
//! sleep can end before the event it waits for. Each helper here polls what Redis (or lockman)
//! shows until the state the next step needs is there, with a limit far above any normal wait
//! that only a broken feature reaches; [`eventually`] is the general poll.

use std::time::{Duration, Instant};

use super::commands::{command_calls, reset_stats};

/// How long the helpers wait before they fail the test: far above what a state takes to come
/// about on a loaded machine, so that only a missing feature reaches it.
pub const LIMIT: Duration = Duration::from_secs(10);

/// Waits until no script runs for 200 ms (every waiter's attempts are done and it is parked),
/// then returns with the command counts reset at the start of that quiet window. Panics when
/// scripts keep running for [`LIMIT`].
pub async fn quiet(raw: &mut redis::Connection) {
    let deadline = Instant::now() + LIMIT;
    while Instant::now() < deadline {
        reset_stats(raw);
        tokio::time::sleep(Duration::from_millis(200)).await;
        if command_calls(raw, "evalsha") == 0 {
            return;
        }
    }
    panic!("scripts kept running with every waiter parked");
}

/// Waits until `command` has run at least `n` times since the last RESETSTAT (say, a waiter's
/// first attempt and the one it makes once its subscription took effect). Panics after
/// [`LIMIT`].
pub async fn calls_reach(raw: &mut redis::Connection, command: &str, n: u64) {
    let reached = eventually(LIMIT, || command_calls(raw, command) >= n).await;
    assert!(
        reached,
        "{command} ran {} times, not {n}",
        command_calls(raw, command)
    );
}

/// Waits until `channel` has at least `n` subscribers (`PUBSUB NUMSUB`; a manager subscribes
/// once per channel, whatever its number of waiters). Panics after [`LIMIT`].
pub async fn subscribers(raw: &mut redis::Connection, channel: &str, n: u64) {
    let count = |raw: &mut redis::Connection| {
        redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query::<(String, u64)>(raw)
            .map_or(0, |(_, n)| n)
    };
    let reached = eventually(LIMIT, || count(raw) >= n).await;
    assert!(reached, "{channel} has {} subscribers, not {n}", count(raw));
}

/// Waits until the fair lock `name`'s queue in Redis is `len` long (a spawned waiter has
/// queued: the next one spawned after this queues behind it). Panics after [`LIMIT`].
pub async fn queued(raw: &mut redis::Connection, name: &str, len: usize) {
    let reached = eventually(LIMIT, || super::fair::queue(raw, name).len() == len).await;
    assert!(
        reached,
        "the queue of {name} is {:?}, not {len} long",
        super::fair::queue(raw, name)
    );
}

/// Waits until `check` holds, and panics with `what` when it does not within [`LIMIT`].
pub async fn until(what: &str, check: impl FnMut() -> bool) {
    assert!(
        eventually(LIMIT, check).await,
        "not within {LIMIT:?}: {what}"
    );
}

/// Waits until the shard channel `channel` has at least `n` subscribers on the node `raw` is
/// connected to (`PUBSUB SHARDNUMSUB`: a Cluster's lockman waits by SSUBSCRIBE on the owning
/// shard). Panics after [`LIMIT`].
pub async fn shard_subscribers(raw: &mut redis::Connection, channel: &str, n: u64) {
    let count = |raw: &mut redis::Connection| {
        redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(channel)
            .query::<(String, u64)>(raw)
            .map_or(0, |(_, n)| n)
    };
    let reached = eventually(LIMIT, || count(raw) >= n).await;
    assert!(
        reached,
        "{channel} has {} shard subscribers, not {n}",
        count(raw)
    );
}

/// Polls `check` every 10 ms until it holds or `limit` passes; returns whether it held.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// [`eventually`] for code that is not async: polls `check` every 20 ms up to `limit`.
pub fn eventually_blocking(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits up to `limit` until `channel` has a subscriber (`PUBSUB NUMSUB`): a waiter that
/// subscribed is waiting. Returns whether it had one.
pub async fn subscribed(conn: &mut redis::Connection, channel: &str, limit: Duration) -> bool {
    eventually(limit, || {
        redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query::<(String, u64)>(conn)
            .is_ok_and(|(_, n)| n > 0)
    })
    .await
}

/// The guard a spawned `acquire` got, waiting for it at most `limit`: panics (failing the test)
/// when the waiter was not woken in time or failed.
pub async fn woken(
    waiting: tokio::task::JoinHandle<Result<lockman::LockGuard, lockman::LockError>>,
    limit: Duration,
) -> lockman::LockGuard {
    tokio::time::timeout(limit, waiting)
        .await
        .expect("the waiter was woken in time")
        .expect("the waiter did not panic")
        .expect("the waiter acquired")
}

/// Whether every lock actor of `manager` stops within `limit` (checked every 10 ms).
pub async fn lock_actors_stop(manager: &lockman::LockManager, limit: Duration) -> bool {
    // An idle lock actor lingers between one and two `idle_linger`s before it stops; the
    // managers of these tests keep the default.
    let deadline = Instant::now() + limit + 2 * lockman::DEFAULT_IDLE_LINGER;
    while manager.live_lock_actors().await > 0 {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}
