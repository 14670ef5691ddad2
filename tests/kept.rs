//! The kept channel's edges (docs/protocol.md, "When a lock's channel is unsubscribed"): a
//! waiter that gets a lock of an unfair kind leaves its manager subscribed to the lock's channel
//! until the name's actor departs, so the name's next wait sends no SUBSCRIBE. Here that next
//! wait is attacked: the pub/sub connection killed before it or while it waits, a name prefix,
//! and another kind of the same name (which shares the channel) waiting while it is kept, or
//! after the keeping actor departed.
//!
//! Every wait here is behind another manager's hold taken without a lease, so its PTTL is the
//! watchdog timeout (30 s): a waiter that missed the release's message would retry only then.
//! Each waiter must have the lock within [`WOKEN_WITHIN`] of the release; and before the
//! release it is parked ([`support::wait::quiet`]: no script runs), so nothing but the message
//! can wake it in time.

mod support;

use std::time::{Duration, Instant};

use lockman::{Config, LockManager};
use support::{RedisServer, commands::kill_clients, wait};

/// Far below the 30 s PTTL a waiter deaf to the message retries at, far above a loaded
/// machine's reconnection and round trips.
const WOKEN_WITHIN: Duration = Duration::from_secs(5);

/// Long enough that the keeping actor lingers through a test: its channel stays kept.
const LONG_LINGER: Duration = Duration::from_secs(60);

fn channel(key: &str) -> String {
    format!("redisson_lock__channel:{{{key}}}")
}

fn numsub(raw: &mut redis::Connection, channel: &str) -> u64 {
    let (_, n): (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(raw)
        .expect("PUBSUB NUMSUB");
    n
}

async fn manager(config: Config) -> LockManager {
    LockManager::start(config).await.expect("manager starts")
}

/// `waiter`'s lock `name` is taken by a waiter while `other` holds it, then released: its
/// channel (`key`'s) is kept, with nobody waiting.
async fn keep(raw: &mut redis::Connection, waiter: &LockManager, other: &LockManager, name: &str) {
    let key = waiter.lock(name).key().to_owned();
    let held = other.lock(name).acquire().await.unwrap();
    let lock = waiter.lock(name);
    let task = tokio::spawn(async move { lock.acquire().await });
    wait::subscribers(raw, &channel(&key), 1).await;
    held.release().await.unwrap();
    let guard = wait::woken(task, Duration::from_secs(10)).await;
    guard.release().await.unwrap();
    assert_eq!(numsub(raw, &channel(&key)), 1, "kept after the grant");
}

/// The task's wait is parked: no script runs for 200 ms and it has no answer.
async fn parked<T>(raw: &mut redis::Connection, task: &tokio::task::JoinHandle<T>) {
    wait::quiet(raw).await;
    assert!(!task.is_finished(), "the waiter must wait");
}

/// Releases `held` and returns the guard `task` waited for, asserting it came within
/// [`WOKEN_WITHIN`] of the release: by the message, not the 30 s PTTL.
async fn released_and_woken<G>(
    held: lockman::LockGuard,
    task: tokio::task::JoinHandle<Result<G, lockman::LockError>>,
    what: &str,
) -> G {
    let freed = Instant::now();
    held.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(40), task)
        .await
        .expect("answered by the PTTL's retry at the latest")
        .expect("no panic")
        .expect("the waiter acquired");
    let took = freed.elapsed();
    assert!(
        took < WOKEN_WITHIN,
        "{what}: the waiter had the lock {took:?} after the release"
    );
    guard
}

/// Kills the manager's pub/sub connection (every pub/sub client: only `keeper` has one
/// subscribed) and waits until it is back with the kept `channel` subscribed again.
async fn kill_pubsub_and_wait_back(raw: &mut redis::Connection, channel: &str) {
    kill_clients(raw, &["pubsub"]);
    assert_eq!(numsub(raw, channel), 0, "the subscriber is gone");
    wait::subscribers(raw, channel, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_channel_is_subscribed_again_after_its_connection_is_killed_and_wakes_the_next_wait()
{
    let server = RedisServer::start();
    let mut raw = server.conn();
    let a = manager(Config::new(server.url()).idle_linger(LONG_LINGER)).await;
    let b = manager(Config::new(server.url())).await;
    keep(&mut raw, &a, &b, "k").await;
    let ch = channel("k");

    kill_pubsub_and_wait_back(&mut raw, &ch).await;
    let held = b.lock("k").acquire().await.unwrap();
    let lock = a.lock("k");
    let task = tokio::spawn(async move { lock.acquire().await });
    parked(&mut raw, &task).await;
    let guard = released_and_woken(held, task, "killed before the wait").await;
    guard.release().await.unwrap();
    assert_eq!(numsub(&mut raw, &ch), 1, "kept again");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_a_kept_channel_survives_its_connection_killed_meanwhile() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let a = manager(Config::new(server.url()).idle_linger(LONG_LINGER)).await;
    let b = manager(Config::new(server.url())).await;
    keep(&mut raw, &a, &b, "k").await;
    let ch = channel("k");

    let held = b.lock("k").acquire().await.unwrap();
    let lock = a.lock("k");
    let task = tokio::spawn(async move { lock.acquire().await });
    parked(&mut raw, &task).await;
    // Back, the waiter tries once (messages of the gap are lost) and finds the lock held.
    kill_pubsub_and_wait_back(&mut raw, &ch).await;
    parked(&mut raw, &task).await;
    let guard = released_and_woken(held, task, "killed during the wait").await;
    guard.release().await.unwrap();
    assert_eq!(numsub(&mut raw, &ch), 1, "kept again");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefixed_kept_channel_wakes_the_next_wait_also_after_a_kill() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let config = |url: String| Config::new(url).name_prefix("app1:");
    let a = manager(config(server.url()).idle_linger(LONG_LINGER)).await;
    let b = manager(config(server.url())).await;
    keep(&mut raw, &a, &b, "p").await;
    let ch = channel("app1:p");
    assert_eq!(numsub(&mut raw, &channel("p")), 0, "only the mapped name's");

    for kill in [false, true] {
        if kill {
            kill_pubsub_and_wait_back(&mut raw, &ch).await;
        }
        let held = b.lock("p").acquire().await.unwrap();
        let lock = a.lock("p");
        let task = tokio::spawn(async move { lock.acquire().await });
        parked(&mut raw, &task).await;
        let guard = released_and_woken(held, task, &format!("prefixed, kill {kill}")).await;
        guard.release().await.unwrap();
        assert_eq!(numsub(&mut raw, &ch), 1, "kill {kill}: kept");
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// The reentrant lock's actor keeps the channel; a non-reentrant and a fenced waiter of the
/// same name (actors of their own, on the same channel) wait while it is kept, so does the
/// name's read-write lock (on a channel of its own), and a fenced waiter again after the keeping
/// actor departed (its UNSUBSCRIBE must not deafen the waiter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_kinds_of_a_name_wait_on_its_kept_channel_and_outlive_the_keeper() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    // Long enough to keep the channel through each wait's start, short enough to see the
    // keeper depart.
    let linger = Duration::from_secs(2);
    let a = manager(Config::new(server.url()).idle_linger(linger)).await;
    let b = manager(Config::new(server.url())).await;
    let ch = channel("s");

    // While kept (the reentrant actor lingers): a non-reentrant waiter, then a fenced one.
    keep(&mut raw, &a, &b, "s").await;
    let held = b.lock("s").acquire().await.unwrap();
    let lock = a.non_reentrant_lock("s");
    let task = tokio::spawn(async move { lock.acquire().await });
    parked(&mut raw, &task).await;
    let guard = released_and_woken(held, task, "non-reentrant, kept").await;
    guard.release().await.unwrap();

    keep(&mut raw, &a, &b, "s").await;
    let held = b.lock("s").acquire().await.unwrap();
    let lock = a.fenced_lock("s");
    let task = tokio::spawn(async move { lock.acquire().await });
    parked(&mut raw, &task).await;
    let guard = released_and_woken(held, task, "fenced, kept").await;
    guard.release().await.unwrap();

    // The read-write lock of the name (its own hash layout and channel, so used after the lock
    // is free) while the reentrant actor keeps the lock's channel: its write waiter is woken on
    // its own channel.
    keep(&mut raw, &a, &b, "s").await;
    let held = b.read_write_lock("s").write().acquire().await.unwrap();
    let lock = a.read_write_lock("s").write();
    let task = tokio::spawn(async move { lock.acquire().await });
    parked(&mut raw, &task).await;
    let guard = released_and_woken(held, task, "write, lock's channel kept").await;
    guard.release().await.unwrap();

    // A fenced waiter whose wait outlasts the keeping actor.
    keep(&mut raw, &a, &b, "s").await;
    let held = b.lock("s").acquire().await.unwrap();
    let lock = a.fenced_lock("s");
    let task = tokio::spawn(async move { lock.acquire().await });
    parked(&mut raw, &task).await;
    // Only the fenced actor is left, busy with its waiter (an idle actor departs within two
    // lingers).
    let deadline = Instant::now() + wait::LIMIT;
    while a.live_lock_actors().await > 1 {
        assert!(
            Instant::now() < deadline,
            "the keeping actor never departed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    parked(&mut raw, &task).await;
    assert_eq!(numsub(&mut raw, &ch), 1, "the waiter's channel stays");
    let guard = released_and_woken(held, task, "fenced, keeper departed").await;
    guard.release().await.unwrap();
    a.shutdown().await;
    b.shutdown().await;
}

/// `PUBSUB SHARDNUMSUB` of `channel` on the node `raw` is connected to.
fn shard_numsub(raw: &mut redis::Connection, channel: &str) -> u64 {
    let (_, n): (String, u64) = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query(raw)
        .expect("PUBSUB SHARDNUMSUB");
    n
}

/// The kept channel on a Cluster, by sharded pub/sub: `a` keeps the name's channel subscribed on
/// the shard that owns it; its pub/sub connection to that shard is killed before the next wait,
/// then during one. Each time it is subscribed there again, and the wait is woken by `b`'s
/// release within [`WOKEN_WITHIN`] (the hold's PTTL is 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_kept_shard_channel_survives_its_connection_killed_and_wakes() {
    let cluster = support::cluster::Cluster::start(3, 0);
    let name = "kept-sharded";
    let ch = channel(name);
    let owner = cluster.owner_of(name);
    let mut raw = support::raw(cluster.node(owner));
    let config = || Config::cluster(cluster.urls());
    let a = manager(config().idle_linger(LONG_LINGER)).await;
    let b = manager(config()).await;

    // Kept: `a` waited, was granted and released; the shard still has its subscription.
    let held = b.lock(name).acquire().await.unwrap();
    let lock = a.lock(name);
    let task = tokio::spawn(async move { lock.acquire().await });
    wait::shard_subscribers(&mut raw, &ch, 1).await;
    let guard = released_and_woken(held, task, "cluster, first wait").await;
    guard.release().await.unwrap();
    assert_eq!(shard_numsub(&mut raw, &ch), 1, "kept after the grant");

    for during in [false, true] {
        let what = if during {
            "during the wait"
        } else {
            "before the wait"
        };
        if !during {
            kill_clients(&mut raw, &["pubsub"]);
            assert_eq!(
                shard_numsub(&mut raw, &ch),
                0,
                "{what}: the subscriber is gone"
            );
            wait::shard_subscribers(&mut raw, &ch, 1).await;
        }
        let held = b.lock(name).acquire().await.unwrap();
        let lock = a.lock(name);
        let task = tokio::spawn(async move { lock.acquire().await });
        parked(&mut raw, &task).await;
        if during {
            kill_clients(&mut raw, &["pubsub"]);
            assert_eq!(
                shard_numsub(&mut raw, &ch),
                0,
                "{what}: the subscriber is gone"
            );
            wait::shard_subscribers(&mut raw, &ch, 1).await;
            // Back, the waiter tries once (messages of the gap are lost) and finds it held.
            parked(&mut raw, &task).await;
        }
        let guard = released_and_woken(held, task, &format!("cluster, killed {what}")).await;
        guard.release().await.unwrap();
        assert_eq!(shard_numsub(&mut raw, &ch), 1, "{what}: kept again");
    }
    assert!(cluster.lock_keys().is_empty(), "{:?}", cluster.lock_keys());
    a.shutdown().await;
    b.shutdown().await;
}
