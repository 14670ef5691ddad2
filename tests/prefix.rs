//! `Config::name_prefix` against a real Redis: every kind of lock and every synchronizer under the
//! prefix `app1:`, with the exact keys (`KEYS *`) and channels (a `PSUBSCRIBE *` listener) read
//! back, all built from the mapped name as Redisson builds them with its `PrefixNameMapper`
//! (fair-lock keys as 3.52+); a name that already carries the prefix is not prefixed twice;
//! handles and `describe` give the unmapped name (docs/protocol.md, "Name prefix").

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use lockman::{Config, LockManager};
use redis::Commands;
use support::{RedisServer, commands::keys_but_records, wait::subscribed};

const PREFIX: &str = "app1:";

/// Every channel a `PSUBSCRIBE *` listener heard, in order, until `payload` arrived on `last`.
fn channels_until(listener: &mut redis::Connection, last: &str, payload: &str) -> Vec<String> {
    let mut heard = Vec::new();
    for _ in 0..100 {
        let message = support::commands::next_message(listener);
        let channel = message[2].clone();
        let done = channel == last && message[3] == payload;
        heard.push(channel);
        if done {
            return heard;
        }
    }
    panic!("{last} never came: {heard:?}");
}

#[tokio::test]
async fn every_kind_and_synchronizer_uses_the_mapped_name() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mut all = support::commands::listen(server.conn(), "PSUBSCRIBE", "*");
    let mgr = LockManager::start(Config::new(server.url()).name_prefix(PREFIX))
        .await
        .unwrap();

    // Names as given, keys as mapped; one that carries the prefix already is used as it is.
    let lock = mgr.lock("orders");
    assert_eq!((lock.name(), lock.key()), ("orders", "app1:orders"));
    let same = mgr.lock("app1:orders");
    assert_eq!((same.name(), same.key()), ("orders", "app1:orders"));
    let guard = lock.acquire().await.unwrap();
    assert!(
        same.try_acquire().await.unwrap().is_none(),
        "one lock, whichever way it is named"
    );
    let fenced = mgr.fenced_lock("tokens").acquire().await.unwrap();
    let rw = mgr.read_write_lock("doc");
    let reading = rw.read().acquire().await.unwrap();
    let fair = mgr.fair_lock("queue");
    let fair_held = fair.acquire().await.unwrap();
    let waiter = mgr.fair_lock("queue");
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.try_acquire_for(Duration::from_secs(20)).await }
    });
    let waiter_channel = format!(
        "redisson_lock__channel:{{app1:queue}}:{}",
        waiter.holder_id()
    );
    assert!(subscribed(&mut raw, &waiter_channel, Duration::from_secs(5)).await);
    let non_reentrant = mgr.non_reentrant_lock("single").acquire().await.unwrap();
    let non_reentrant_fair = mgr
        .non_reentrant_fair_lock("single-fair")
        .acquire()
        .await
        .unwrap();
    let sem = mgr.semaphore("pool");
    assert!(sem.try_set_permits(2).await.unwrap());
    let permit = sem.acquire(1).await.unwrap();
    let psem = mgr.permit_semaphore("leases");
    assert!(psem.try_set_permits(2).await.unwrap());
    let leased = psem.acquire(1).await.unwrap();
    let latch = mgr.count_down_latch("gate");
    assert!(latch.try_set_count(1).await.unwrap());
    let election = mgr.election("leader");
    assert_eq!((election.name(), election.key()), ("leader", "app1:leader"));
    let lead = election.campaign().await.unwrap();
    assert_eq!(lead.name(), "leader");
    // Guards give the name as given too, and the key beside it.
    assert_eq!((guard.name(), guard.key()), ("orders", "app1:orders"));
    assert_eq!(fenced.name(), "tokens");
    assert_eq!(permit.name(), "pool");

    let expected: BTreeSet<String> = [
        "app1:orders",
        "app1:tokens",
        "redisson_lock_token:{app1:tokens}",
        "app1:doc",
        &format!("{{app1:doc}}:{}:rwlock_timeout:1", rw.holder_id()),
        "app1:queue",
        "redisson_lock_queue:{app1:queue}",
        "redisson_lock_timeout:{app1:queue}",
        "app1:single",
        "app1:single-fair",
        "app1:pool",
        "app1:leases",
        "{app1:leases}:timeout",
        "app1:gate",
        "app1:leader",
        "redisson_lock_token:{app1:leader}",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    let (latches, found): (BTreeSet<String>, BTreeSet<String>) = keys_but_records(&mut raw)
        .into_iter()
        .partition(|k| k.starts_with("redisson_unlock_latch:"));
    assert_eq!(found, expected);
    // Request latches carry the mapped name's tag too.
    assert!(!latches.is_empty());
    for latch_key in &latches {
        assert!(
            latch_key.starts_with("redisson_unlock_latch:{app1:"),
            "{latch_key}"
        );
    }
    let (hash_field, _): (String, String) = {
        let h: Vec<(String, String)> = raw.hgetall("app1:orders").unwrap();
        h[0].clone()
    };
    assert_eq!(hash_field, lock.holder_id());

    // describe and describe_synchronizer take and give the unmapped name.
    let info = mgr.describe("orders").await.unwrap();
    assert_eq!(info.name, "orders");
    assert_eq!(info.holders[0].holder, lock.holder_id());
    let queue = mgr.describe("queue").await.unwrap();
    assert_eq!(queue.queue.len(), 1);
    let leader = election.leader().await.unwrap().expect("a leader");
    assert_eq!(leader.term, lead.term());
    let sync = mgr.describe_synchronizer("leases").await.unwrap();
    assert_eq!(
        (sync.name.as_str(), sync.count, sync.held.len()),
        ("leases", Some(1), 1)
    );

    // Releases publish on the mapped names' channels.
    guard.release().await.unwrap();
    fenced.release().await.unwrap();
    reading.release().await.unwrap();
    fair_held.release().await.unwrap();
    let next_holder = waiting
        .await
        .unwrap()
        .unwrap()
        .expect("the fair waiter gets in");
    next_holder.release().await.unwrap();
    non_reentrant.release().await.unwrap();
    non_reentrant_fair.release().await.unwrap();
    permit.release().await.unwrap();
    leased.release().await.unwrap();
    lead.resign().await.unwrap();
    assert_eq!(latch.count_down().await.unwrap(), 0);
    let heard = channels_until(
        &mut all,
        "redisson_countdownlatch__channel__{app1:gate}",
        "0",
    );
    let heard: BTreeSet<String> = heard.into_iter().collect();
    let expected_channels: BTreeSet<String> = [
        "redisson_sc:{app1:pool}",
        "redisson_sc:{app1:leases}",
        "redisson_lock__channel:{app1:orders}",
        "redisson_lock__channel:{app1:tokens}",
        "redisson_rwlock:{app1:doc}",
        waiter_channel.as_str(),
        "redisson_lock__channel:{app1:single}",
        "redisson_countdownlatch__channel__{app1:gate}",
        "redisson_lock__channel:{app1:leader}",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(heard, expected_channels);
    let left: BTreeSet<String> = keys_but_records(&mut raw)
        .into_iter()
        .filter(|k| !k.starts_with("redisson_unlock_latch:"))
        .collect();
    assert_eq!(
        left,
        [
            "app1:pool",
            "app1:leases",
            "redisson_lock_token:{app1:tokens}",
            "redisson_lock_token:{app1:leader}",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect()
    );
    mgr.shutdown().await;
}

/// A manager without a prefix and one with it share a name only through the mapped name, as a
/// Java client without a mapper and one with it would.
#[tokio::test]
async fn a_prefixed_and_a_plain_manager_meet_on_the_mapped_name() {
    let server = RedisServer::start();
    let plain = LockManager::start(Config::new(server.url())).await.unwrap();
    let prefixed = LockManager::start(Config::new(server.url()).name_prefix(PREFIX))
        .await
        .unwrap();
    let held = prefixed.lock("x").acquire().await.unwrap();
    assert!(
        plain
            .lock("x")
            .try_acquire()
            .await
            .unwrap()
            .is_some_and(|g| {
                drop(g);
                true
            })
    );
    assert!(plain.lock("app1:x").try_acquire().await.unwrap().is_none());
    assert_eq!(plain.describe("app1:x").await.unwrap().holders.len(), 1);
    held.release().await.unwrap();
    plain.shutdown().await;
    prefixed.shutdown().await;
}

/// An election under a prefix is the prefixed fenced lock of its name: a fenced lock of that
/// name (or Redisson's `RFencedLock` behind the same mapper) sees the leader as its holder, and
/// tenants with other prefixes hold elections of their own.
#[tokio::test]
async fn an_election_under_a_prefix_is_the_prefixed_fenced_lock() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let app1 = LockManager::start(Config::new(server.url()).name_prefix(PREFIX))
        .await
        .unwrap();
    let app2 = LockManager::start(Config::new(server.url()).name_prefix("app2:"))
        .await
        .unwrap();
    let plain = LockManager::start(Config::new(server.url())).await.unwrap();
    let lead = app1.election("leader").campaign().await.unwrap();
    assert!(
        app1.fenced_lock("leader")
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "the tenant's fenced lock of the name is the election's"
    );
    assert!(
        plain
            .fenced_lock("app1:leader")
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "a client without the mapper meets it on the mapped name"
    );
    let other = app2
        .election("leader")
        .try_campaign_for(Duration::from_secs(2))
        .await
        .unwrap()
        .expect("another tenant leads its own election");
    let (term1, term2): (u64, u64) = (
        raw.get("redisson_lock_token:{app1:leader}").unwrap(),
        raw.get("redisson_lock_token:{app2:leader}").unwrap(),
    );
    assert_eq!((term1, term2), (lead.term(), other.term()));
    let found: BTreeSet<String> = keys_but_records(&mut raw);
    assert!(
        !found.contains("leader") && !found.contains("redisson_lock_token:{leader}"),
        "nothing under the bare name: {found:?}"
    );
    assert_eq!(
        app1.election("leader")
            .leader()
            .await
            .unwrap()
            .map(|l| l.term),
        Some(lead.term())
    );
    lead.resign().await.unwrap();
    other.resign().await.unwrap();
    for mgr in [app1, app2, plain] {
        mgr.shutdown().await;
    }
}

/// Under a prefix an empty name (or the prefix alone) names nothing: every way in refuses it
/// with `InvalidArgument` before anything is sent, as it does without a prefix.
#[tokio::test]
async fn a_prefix_alone_is_no_name_on_any_way_in() {
    use lockman::{LockError, LockKind, SyncKind};
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = LockManager::start(Config::new(server.url()).name_prefix(PREFIX))
        .await
        .unwrap();
    let invalid = |what: &str, res: Result<(), LockError>| {
        assert!(
            matches!(res, Err(LockError::InvalidArgument { .. })),
            "{what}: {res:?}"
        );
    };
    for name in ["", PREFIX] {
        let lock = mgr.lock(name);
        invalid("acquire", lock.acquire().await.map(drop));
        invalid("try_acquire", lock.try_acquire().await.map(drop));
        invalid("is_locked", lock.is_locked().await.map(drop));
        invalid("force_unlock", lock.force_unlock().await.map(drop));
        invalid("fenced", mgr.fenced_lock(name).acquire().await.map(drop));
        invalid("fair", mgr.fair_lock(name).try_acquire().await.map(drop));
        invalid(
            "non-reentrant",
            mgr.non_reentrant_lock(name).try_acquire().await.map(drop),
        );
        invalid(
            "read",
            mgr.read_write_lock(name)
                .read()
                .try_acquire()
                .await
                .map(drop),
        );
        invalid(
            "semaphore",
            mgr.semaphore(name).try_set_permits(1).await.map(drop),
        );
        invalid(
            "permit semaphore",
            mgr.permit_semaphore(name)
                .try_set_permits(1)
                .await
                .map(drop),
        );
        invalid(
            "latch",
            mgr.count_down_latch(name).try_set_count(1).await.map(drop),
        );
        invalid("campaign", mgr.election(name).campaign().await.map(drop));
        invalid("leader", mgr.election(name).leader().await.map(drop));
        invalid("describe", mgr.describe(name).await.map(drop));
        invalid(
            "describe_synchronizer",
            mgr.describe_synchronizer(name).await.map(drop),
        );
        invalid(
            "lock_actor",
            mgr.lock_actor_of(LockKind::Reentrant, name).await.map(drop),
        );
        invalid(
            "sync_actor",
            mgr.sync_actor(SyncKind::Semaphore, name).await.map(drop),
        );
    }
    assert_eq!(
        keys_but_records(&mut raw),
        BTreeSet::new(),
        "nothing was written"
    );
    mgr.shutdown().await;
}

/// A hold lost under a prefix is reported with the name as given.
#[tokio::test]
async fn a_lost_hold_is_reported_with_the_name_as_given() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let config = Config::new(server.url())
        .name_prefix(PREFIX)
        .watchdog_timeout(Duration::from_secs(2));
    let mgr = LockManager::start(config).await.unwrap();
    let guard = mgr.lock("orders").acquire().await.unwrap();
    let _: () = raw.del("app1:orders").unwrap();
    let res = guard.scope(std::future::pending::<()>()).await;
    assert!(
        matches!(res, Err(lockman::LockError::HoldLost { ref name }) if name == "orders"),
        "{res:?}"
    );
    mgr.shutdown().await;
}
