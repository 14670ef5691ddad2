//! Redis Cluster topology changes under holds and waiters: a live slot migration (MIGRATING /
//! IMPORTING, then MIGRATE and SETSLOT NODE) and a master failover to its replica; and replica
//! sync, which waits on the replica of each lock's master.

mod support;

use std::time::{Duration, Instant};

use lockman::{Config, LockManager};
use redis::AsyncCommands;
use support::cluster::Cluster;
use support::{wait, wait::woken};

async fn manager(cluster: &Cluster, watchdog: Duration) -> LockManager {
    let config = Config::cluster(cluster.urls())
        .watchdog_timeout(watchdog)
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1));
    LockManager::start(config)
        .await
        .expect("start on the cluster")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migration_keeps_holds_and_waiters_and_moves_subscriptions() {
    let cluster = Cluster::start(3, 0);
    let watchdog = Duration::from_secs(3);
    let a = manager(&cluster, watchdog).await;
    let b = manager(&cluster, watchdog).await;
    let (slot, from) = (cluster.slot_of("mv"), cluster.owner_of("mv"));
    let to = cluster
        .nodes()
        .iter()
        .map(|n| n.port())
        .find(|p| *p != from)
        .unwrap();

    // A long lease (no TTL retry for a minute) so that only the unlock message can wake B.
    let held = a
        .lock("mv")
        .acquire_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let renewed = a.lock("{mv}:renewed").acquire().await.unwrap(); // the watchdog renews it
    let waiter = b.lock("mv");
    let waiting = tokio::spawn(async move { waiter.acquire().await });
    // B waits on the slot's shard channel before the slot moves.
    wait::shard_subscribers(
        &mut support::raw(cluster.node(from)),
        "redisson_lock__channel:{mv}",
        1,
    )
    .await;

    let early = a.lock("{mv}:early").acquire().await.unwrap();
    cluster.begin_migration(slot, from, to);
    // While the slot is half moved: a new lock is asked for (its key is on neither node: the
    // source redirects the script to the target (ASK), and it is granted there or once the slot
    // is whole), and one taken before is released while the keys move.
    let during = tokio::spawn({
        let lock = a.lock("{mv}:during");
        async move { lock.acquire().await }
    });
    // A release while the slot is half moved may meet TRYAGAIN (the script's keys are split
    // between the nodes) until the keys have moved: then the error is retryable, and the
    // lock actor settles the release once the slot is whole again.
    let releasing = tokio::spawn(early.release());
    tokio::time::sleep(Duration::from_millis(50)).await;
    cluster.finish_migration(slot, from, to);
    if let Err(e) = releasing.await.unwrap() {
        assert!(e.is_retryable(), "{e:?}");
    }
    let during = tokio::time::timeout(Duration::from_secs(10), during)
        .await
        .expect("granted once the slot is whole")
        .unwrap()
        .expect("acquire during migration");

    // Renewals follow the slot: the hold outlives two watchdog timeouts, on the target.
    tokio::time::sleep(watchdog * 2).await;
    assert!(!renewed.is_lost(), "a hold lost by a migration");
    let mut target = support::async_conn(cluster.node(to)).await;
    let ttl: i64 = target.pttl("{mv}:renewed").await.unwrap();
    assert!(ttl > 0, "renewed on the new owner: {ttl}");
    assert!(
        !target.exists::<_, bool>("{mv}:early").await.unwrap(),
        "the release made during the migration was settled"
    );
    assert!(target.exists::<_, bool>("{mv}:during").await.unwrap());
    during.release().await.expect("release after migration");

    // The waiter's channel moved with the slot (the source ended its SSUBSCRIBE): a release
    // on the new owner still wakes it, long before the 60 s lease.
    assert!(!waiting.is_finished());
    let released = Instant::now();
    held.release().await.expect("release after migration");
    let guard = woken(waiting, Duration::from_secs(5)).await;
    assert!(released.elapsed() < Duration::from_secs(5));
    let fields: Vec<String> = target.hkeys("mv").await.unwrap();
    assert_eq!(fields, vec![guard.holder_id().to_owned()]);
    guard.release().await.unwrap();
    renewed.release().await.unwrap();
    assert!(!target.exists::<_, bool>("mv").await.unwrap());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_failover_keeps_other_shards_moves_waiters_and_reports_lost_holds() {
    let cluster = Cluster::start(3, 1);
    let first = cluster.nodes()[0].port();
    // Names on one master that is not the first node (the test asks the first node about
    // the topology), and one name on another master.
    let pick = |avoid: &[u16], prefix: &str| {
        (0..500)
            .map(|i| format!("{prefix}{i}"))
            .find(|n| !avoid.contains(&cluster.owner_of(n)))
            .unwrap()
    };
    let kept_name = pick(&[first], "fo:");
    let doomed_owner = cluster.owner_of(&kept_name);
    let tag = format!("{{{kept_name}}}");
    let (doomed_name, waited_name) = (format!("{tag}:doomed"), format!("{tag}:waited"));
    let other_name = pick(&[doomed_owner], "other:");
    let replica = cluster.replica_of(doomed_owner);

    // Longer than a failover here (node timeout 2 s, then election), with margin for a busy
    // machine: a hold is only kept through a failover that ends within its watchdog timeout.
    let watchdog = Duration::from_secs(10);
    let a = manager(&cluster, watchdog).await;
    let b = manager(&cluster, watchdog).await;
    let kept = a.lock(kept_name.as_str()).acquire().await.unwrap();
    let other = a.lock(other_name.as_str()).acquire().await.unwrap();
    let held = a
        .lock(waited_name.as_str())
        .acquire_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let waiter = b.lock(waited_name.as_str());
    let waiting = tokio::spawn(async move { waiter.acquire().await });
    let mut master = support::async_conn(cluster.node(doomed_owner)).await;
    cluster.wait_replica_synced(doomed_owner, replica, Duration::from_secs(20));

    // The replica misses one hold: frozen, its replication link cut by the master, then the
    // hold is taken and the master dies before the replica could connect again.
    cluster
        .node(replica)
        .pause(Duration::from_secs(60))
        .expect("pause the node");
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query_async(&mut master)
        .await
        .unwrap();
    let doomed = a.lock(doomed_name.as_str()).acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut nodes = cluster;
    nodes.node_mut(doomed_owner).unwrap().stop();
    nodes.node(replica).resume().expect("resume the node");
    nodes.wait_until_owner(&kept_name, replica, first, Duration::from_secs(30));

    // The hold whose key did not survive is reported; the others are kept.
    tokio::time::timeout(Duration::from_secs(15), doomed.lost())
        .await
        .expect("a hold missing on the promoted replica is reported lost");
    let mut promoted = support::async_conn(nodes.node(replica)).await;
    assert!(!other.is_lost(), "a hold on another shard was lost");
    assert!(!kept.is_lost(), "a hold whose key survived was lost");
    let count: u32 = promoted.hget(&kept_name, kept.holder_id()).await.unwrap();
    assert_eq!(count, 1);

    // The waiter subscribed again on the promoted replica: a release there wakes it.
    wait::shard_subscribers(
        &mut support::raw(nodes.node(replica)),
        // The name has its own hash tag: the channel keeps it as it is (no braces added).
        &format!("redisson_lock__channel:{waited_name}"),
        1,
    )
    .await;
    assert!(!waiting.is_finished());
    assert!(!held.is_lost());
    let released = Instant::now();
    held.release()
        .await
        .expect("release on the promoted replica");
    let guard = woken(waiting, Duration::from_secs(5)).await;
    assert!(released.elapsed() < Duration::from_secs(5));
    let fields: Vec<String> = promoted.hkeys(&waited_name).await.unwrap();
    assert_eq!(fields, vec![guard.holder_id().to_owned()]);
    guard.release().await.unwrap();
    kept.release().await.unwrap();
    other.release().await.unwrap();
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_replicas_in_a_cluster_waits_for_each_masters_replica_and_undoes_without_it() {
    let cluster = Cluster::start(3, 1);
    // One name on each master.
    let mut names: Vec<(String, u16)> = Vec::new();
    for i in 0..500 {
        let name = format!("synced:{i}");
        let owner = cluster.owner_of(&name);
        if names.iter().all(|(_, o)| *o != owner) {
            names.push((name, owner));
        }
    }
    assert_eq!(names.len(), 3, "no name for every master");
    let config = Config::cluster(cluster.urls())
        .sync_replicas(1, Duration::from_millis(300))
        .watchdog_timeout(Duration::from_millis(600))
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(2));
    let mgr = LockManager::start(config).await.expect("start with sync");

    let mut guards = Vec::new();
    for (name, owner) in &names {
        let guard = mgr.lock(name.as_str()).acquire().await.expect("acquired");
        // The replica of the slot's master has it as soon as the acquire returns.
        let mut replica = support::async_conn(cluster.node(cluster.replica_of(*owner))).await;
        let _: () = redis::cmd("READONLY")
            .query_async(&mut replica)
            .await
            .unwrap();
        let on_replica: Vec<String> = replica.hkeys(name).await.unwrap();
        assert_eq!(on_replica, vec![guard.holder_id().to_owned()], "{name}");
        guards.push(guard);
    }
    // Synced renewals, one batch per slot, each on its own master: two watchdog timeouts
    // later every hold is still in place.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for ((name, owner), guard) in names.iter().zip(&guards) {
        assert!(!guard.is_lost(), "{name} lost: a synced renewal failed");
        let ttl: i64 = support::async_conn(cluster.node(*owner))
            .await
            .pttl(name)
            .await
            .unwrap();
        assert!(ttl > 0 && ttl <= 600, "{name}: {ttl}");
    }
    for guard in guards {
        guard.release().await.unwrap();
    }

    // One master's replica frozen: an acquire there fails and leaves nothing; the other masters
    // still grant.
    let (frozen_name, frozen_master) = names[0].clone();
    let replica = cluster.replica_of(frozen_master);
    cluster
        .node(replica)
        .pause(Duration::from_secs(60))
        .expect("pause the node");
    let started = Instant::now();
    let err = mgr
        .lock(frozen_name.as_str())
        .try_acquire()
        .await
        .expect_err("no replica to acknowledge");
    cluster.node(replica).resume().expect("resume the node");
    support::locks::assert_unacknowledged(&err, started);
    let mut master = support::async_conn(cluster.node(frozen_master)).await;
    let exists: bool = master.exists(&frozen_name).await.unwrap();
    assert!(
        !exists,
        "an acquire the replica did not acknowledge was left held"
    );
    let guard = mgr
        .lock(names[1].0.as_str())
        .try_acquire()
        .await
        .unwrap()
        .expect("another master's replica acknowledges");
    guard.release().await.unwrap();
    mgr.shutdown().await;
}
