//! Redis Cluster: locks on every master exclude and wake across managers; unlock messages travel
//! by sharded pub/sub, both ways with a raw client standing in for Redisson; names whose braces
//! would split a lock across slots are refused before anything is sent; every kind works, and
//! holds spread over many slots are renewed. Each test starts a local cluster of three masters
//! of its own, and stops it at its end.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockManager, MultiLock, RedLock, ShardedSubscription};
use redis::AsyncCommands;
use support::cluster::Cluster;
use support::{
    RedisServer, commands::listen, commands::next_message, locks::count_rounds, wait, wait::woken,
};

async fn manager(cluster: &Cluster, watchdog: Duration) -> LockManager {
    let config = Config::cluster(cluster.urls()).watchdog_timeout(watchdog);
    LockManager::start(config)
        .await
        .expect("start on the cluster")
}

/// One lock name per master, `prefix` plus a number: names spread over the shards.
fn one_name_per_master(cluster: &Cluster, prefix: &str) -> Vec<(String, u16)> {
    let mut found: HashMap<u16, String> = HashMap::new();
    for i in 0..200 {
        let name = format!("{prefix}{i}");
        let owner = cluster.owner_of(&name);
        found.entry(owner).or_insert(name);
        if found.len() == 3 {
            break;
        }
    }
    assert_eq!(found.len(), 3, "names on every master");
    found.into_iter().map(|(port, name)| (name, port)).collect()
}

async fn node_conn(cluster: &Cluster, port: u16) -> redis::aio::MultiplexedConnection {
    support::async_conn(cluster.node(port)).await
}

/// On a name of each master: `a` takes it (its hash is on that master), `b` cannot, `b` waits;
/// `a` holds it for `hold` (renewed, never lost) and releases; the unlock message wakes `b` long
/// before the 30 s lease would have run out; nothing is left.
async fn exclude_and_wake_on_every_master(
    cluster: &Cluster,
    (a, b): (&LockManager, &LockManager),
    prefix: &str,
    hold: Duration,
) {
    for (name, owner) in one_name_per_master(cluster, prefix) {
        let held = a.lock(name.as_str()).acquire().await.unwrap();
        let mut raw = node_conn(cluster, owner).await;
        let fields: Vec<String> = raw.hkeys(&name).await.unwrap();
        assert_eq!(
            fields,
            vec![held.holder_id().to_owned()],
            "{name} on its master"
        );
        assert!(b.lock(name.as_str()).try_acquire().await.unwrap().is_none());

        let waiter = b.lock(name.as_str());
        let waiting = tokio::spawn(async move { waiter.acquire().await });
        tokio::time::sleep(hold).await;
        assert!(!held.is_lost(), "{name}: renewed");
        let released = Instant::now();
        held.release().await.unwrap();
        let guard = woken(waiting, Duration::from_secs(5)).await;
        assert!(
            released.elapsed() < Duration::from_millis(900),
            "{name}: woken by the message"
        );
        let fields: Vec<String> = raw.hkeys(&name).await.unwrap();
        assert_eq!(fields, vec![guard.holder_id().to_owned()]);
        guard.release().await.unwrap();
        assert!(!raw.exists::<_, bool>(&name).await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_every_master_exclude_and_wake_across_two_managers() {
    let cluster = Cluster::start(3, 0);
    let a = manager(&cluster, Duration::from_secs(30)).await;
    let b = manager(&cluster, Duration::from_secs(30)).await;
    exclude_and_wake_on_every_master(&cluster, (&a, &b), "wake:", Duration::from_millis(300)).await;

    // Exclusion, counted: read-yield-write rounds on a shared counter of the same slot.
    let mut tasks = Vec::new();
    for mgr in [&a, &b] {
        for _ in 0..2 {
            let lock = mgr.lock("{counted}:lock");
            let raw = node_conn(&cluster, cluster.owner_of("{counted}:n")).await;
            tasks.push(tokio::spawn(count_rounds(lock, raw, "{counted}:n", 25)));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let owner = cluster.owner_of("{counted}:n");
    let total: u64 = node_conn(&cluster, owner)
        .await
        .get("{counted}:n")
        .await
        .unwrap();
    assert_eq!(total, 100);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_messages_travel_by_sharded_pubsub_both_ways() {
    let cluster = Cluster::start(3, 0);
    let mgr = manager(&cluster, Duration::from_secs(30)).await;
    let name = "sharded:wire";
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let owner = cluster.owner_of(name);

    // A "Redisson" holder (raw writes), and a raw SPUBLISH of its release, wake a lockman waiter.
    let mut raw = node_conn(&cluster, owner).await;
    let _: () = raw.hset(name, "redisson-holder:1", 1).await.unwrap();
    let _: () = raw.pexpire(name, 60_000).await.unwrap();
    let waiter = mgr.lock(name);
    let waiting = tokio::spawn(async move { waiter.acquire().await });
    // The SPUBLISH below counts its receivers: the waiter must be one.
    wait::shard_subscribers(&mut support::raw(cluster.node(owner)), &channel, 1).await;
    let _: () = raw.del(name).await.unwrap();
    let receivers: i64 = redis::cmd("SPUBLISH")
        .arg(&channel)
        .arg("0")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        receivers, 1,
        "lockman listens by SSUBSCRIBE on the owning shard"
    );
    let guard = woken(waiting, Duration::from_secs(3)).await;

    // A lockman release is heard by a raw SSUBSCRIBE on the shard that owns the channel.
    let mut listener = listen(support::raw(cluster.node(owner)), "SSUBSCRIBE", &channel);
    guard.release().await.unwrap();
    assert_eq!(next_message(&mut listener), ["smessage", &channel, "0"]);
    mgr.shutdown().await;
}

#[tokio::test]
async fn classic_mode_publishes_with_publish() {
    let cluster = Cluster::start(3, 0);
    let config = Config::cluster(cluster.urls()).sharded_subscription(ShardedSubscription::Off);
    let mgr = LockManager::start(config).await.unwrap();
    let name = "classic:wire";
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let mut listener = listen(support::raw(&cluster.nodes()[0]), "SUBSCRIBE", &channel);
    mgr.lock(name)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Classic messages reach every node's subscribers, wherever the lock lives.
    assert_eq!(next_message(&mut listener), ["message", &channel, "0"]);
    mgr.shutdown().await;
}

#[tokio::test]
async fn names_whose_braces_split_a_lock_are_refused_before_anything_is_sent() {
    let cluster = Cluster::start(3, 0);
    let mgr = manager(&cluster, Duration::from_secs(30)).await;
    let before = cluster.lock_keys();
    for name in ["a{b", "a}b", "{}a{b}", "{}x"] {
        let err = mgr.lock(name).try_acquire().await.expect_err(name);
        assert!(
            matches!(
                &err,
                LockError::InvalidArgument {
                    what: "lock name",
                    ..
                }
            ),
            "{name}: {err:?}"
        );
        assert!(err.to_string().contains("slot"), "{err}");
        let err = mgr.fair_lock(name).force_unlock().await.expect_err(name);
        assert!(matches!(err, LockError::InvalidArgument { .. }), "{err:?}");
    }
    assert_eq!(cluster.lock_keys(), before, "nothing was written");
    // A name with its own tag keeps every key in its slot.
    mgr.lock("{user42}:orders")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    mgr.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_works_and_holds_over_many_slots_are_renewed() {
    let cluster = Cluster::start(3, 0);
    let watchdog = Duration::from_millis(900);
    let mgr = manager(&cluster, watchdog).await;

    // Waiters of the fair lock (woken on their own channel) and of the read-write lock (on its
    // channel) are woken by a release, across managers.
    let other = manager(&cluster, watchdog).await;
    for kind in ["fair", "write"] {
        let name = format!("kinds:wake-{kind}");
        let held = match kind {
            "fair" => {
                mgr.fair_lock(name.as_str())
                    .acquire_with_lease(Duration::from_secs(60))
                    .await
            }
            _ => {
                mgr.read_write_lock(name.as_str())
                    .write()
                    .acquire_with_lease(Duration::from_secs(60))
                    .await
            }
        }
        .unwrap();
        let waiting = match kind {
            "fair" => {
                let lock = other.fair_lock(name.as_str());
                tokio::spawn(async move { lock.acquire().await })
            }
            _ => {
                let lock = other.read_write_lock(name.as_str());
                tokio::spawn(async move { lock.read().acquire().await })
            }
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.release().await.unwrap();
        let guard = woken(waiting, Duration::from_secs(3)).await;
        guard.release().await.unwrap();
    }
    other.shutdown().await;

    let fair = mgr.fair_lock("kinds:fair").acquire().await.unwrap();
    let rw = mgr.read_write_lock("kinds:rw");
    let read = rw.read().acquire().await.unwrap();
    assert!(rw.write().try_acquire().await.unwrap().is_none());
    let fenced = mgr.fenced_lock("kinds:fenced");
    let first = fenced.acquire().await.unwrap();
    let t1 = first.token();
    first.release().await.unwrap();
    let second = fenced.acquire().await.unwrap();
    assert!(second.token() > t1);
    // Fenced writes: a key in the lock's slot (`{name}:…`) is written on the lock's master,
    // its fence beside it; a key in another slot is refused by Redis (CROSSSLOT), a typed
    // error that is not retried, and nothing is written anywhere.
    let owner = cluster.owner_of("kinds:fenced");
    let mut on_owner = node_conn(&cluster, owner).await;
    assert!(second.fenced_set("{kinds:fenced}:out", "v").await.unwrap());
    let written: String = on_owner.get("{kinds:fenced}:out").await.unwrap();
    assert_eq!(written, "v");
    let seen: u64 = on_owner
        .hget("lockman_fence:{kinds:fenced}", "{kinds:fenced}:out")
        .await
        .unwrap();
    assert_eq!(seen, second.token());
    assert_ne!(
        cluster.slot_of("elsewhere"),
        cluster.slot_of("kinds:fenced")
    );
    let before = cluster.total_keys();
    let err = second
        .fenced_set("elsewhere", "v")
        .await
        .expect_err("a key in another slot");
    assert!(
        matches!(
            &err,
            LockError::Redis { op: "fenced set", source }
                if source.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::CrossSlot)
        ),
        "{err:?}"
    );
    assert!(!err.is_retryable(), "{err:?}");
    assert_eq!(cluster.total_keys(), before, "nothing written");

    // Forty holds spread over the slots, renewed for three watchdog timeouts.
    let mut held = Vec::new();
    for i in 0..40 {
        held.push(mgr.lock(format!("renewed:{i}")).acquire().await.unwrap());
    }
    let slots: std::collections::HashSet<u16> = (0..40)
        .map(|i| cluster.owner_of(&format!("renewed:{i}")))
        .collect();
    assert_eq!(slots.len(), 3, "the holds are on every master");
    tokio::time::sleep(watchdog * 3).await;
    for guard in &held {
        assert!(!guard.is_lost(), "{} lost", guard.name());
        let owner = cluster.owner_of(guard.name());
        let ttl: i64 = node_conn(&cluster, owner)
            .await
            .pttl(guard.name())
            .await
            .unwrap();
        assert!(ttl > 0, "{} renewed on its master", guard.name());
    }
    for guard in held {
        guard.release().await.unwrap();
    }
    assert!(!fair.is_lost() && !read.is_lost() && !second.is_lost());
    fair.release().await.unwrap();
    read.release().await.unwrap();
    second.release().await.unwrap();
    mgr.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multilock_over_shards_and_redlock_with_a_cluster_member() {
    let cluster = Cluster::start(3, 0);
    let a = manager(&cluster, Duration::from_secs(30)).await;
    let b = manager(&cluster, Duration::from_secs(30)).await;
    let names = one_name_per_master(&cluster, "multi:");

    // A MultiLock whose members live on three shards: all or nothing.
    let multi_a = MultiLock::new(names.iter().map(|(n, _)| a.lock(n.as_str())).collect());
    let multi_b = MultiLock::new(names.iter().map(|(n, _)| b.lock(n.as_str())).collect());
    let held = multi_a.acquire().await.unwrap();
    for (name, owner) in &names {
        assert!(
            node_conn(&cluster, *owner)
                .await
                .exists::<_, bool>(name)
                .await
                .unwrap()
        );
    }
    assert!(multi_b.try_acquire().await.unwrap().is_none());
    held.release().await.unwrap();
    let taken = multi_b.try_acquire().await.unwrap().expect("free again");
    taken.release().await.unwrap();

    // A RedLock of the cluster and two single servers: a majority of three.
    let singles = [RedisServer::start(), RedisServer::start()];
    let mut members = vec![a.lock("red")];
    let mut single_managers = Vec::new();
    for s in &singles {
        let m = LockManager::connect(&s.url()).await.unwrap();
        members.push(m.lock("red"));
        single_managers.push(m);
    }
    let red = RedLock::new(members);
    let guard = red
        .acquire()
        .await
        .expect("quorum over a cluster and two servers");
    assert_eq!(guard.members_held(), 3);
    let owner = cluster.owner_of("red");
    assert!(
        node_conn(&cluster, owner)
            .await
            .exists::<_, bool>("red")
            .await
            .unwrap()
    );
    guard.release().await.unwrap();
    assert!(
        !node_conn(&cluster, owner)
            .await
            .exists::<_, bool>("red")
            .await
            .unwrap()
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn an_acl_user_reaches_every_node() {
    // `app` may do everything; `nossub` everything but SSUBSCRIBE, which waiting needs.
    let user: Vec<String> =
        "--user app on >app-pw ~* &* +@all --user nossub on >pw ~* &* +@all -ssubscribe"
            .split(' ')
            .map(str::to_owned)
            .collect();
    let cluster = Cluster::start_with(3, 0, &user);
    let urls: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| format!("redis://app:app-pw@127.0.0.1:{}", n.port()))
        .collect();
    let mgr = LockManager::start(Config::cluster(urls.clone()))
        .await
        .unwrap();
    for (name, owner) in one_name_per_master(&cluster, "acl:") {
        let guard = mgr.lock(name.as_str()).acquire().await.unwrap();
        let fields: Vec<String> = node_conn(&cluster, owner).await.hkeys(&name).await.unwrap();
        assert_eq!(fields, vec![guard.holder_id().to_owned()]);
        guard.release().await.unwrap();
    }
    mgr.shutdown().await;
    let wrong: Vec<String> = urls.iter().map(|u| u.replace("app-pw", "bad-pw")).collect();
    let err = LockManager::start(Config::cluster(wrong))
        .await
        .expect_err("wrong password");
    assert!(!format!("{err} {err:?}").contains("bad-pw"), "{err:?}");
    assert!(matches!(err, LockError::Auth { .. }), "{err:?}");
    // A refused SSUBSCRIBE fails the start, naming it, as a refused SUBSCRIBE does on one server.
    let nossub: Vec<String> = urls
        .iter()
        .map(|u| u.replace("app:app-pw", "nossub:pw"))
        .collect();
    let err = LockManager::start(Config::cluster(nossub))
        .await
        .expect_err("no SSUBSCRIBE");
    match &err {
        LockError::NoPermission { what, .. } => {
            assert!(
                what.contains("subscribe to redisson_lock__channel"),
                "{what}"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// A cluster that speaks only TLS (to clients and on its bus), reached by `rediss://` seeds and
/// a private CA: every connection lockman opens to its nodes — commands, sharded pub/sub,
/// renewals — checks their certificates, and locks on every master exclude and wake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_excludes_and_wakes_on_every_master() {
    let certs = std::sync::Arc::new(support::certs::TestCerts::generate());
    let cluster = Cluster::start_tls(3, certs.clone());
    assert!(
        cluster
            .urls()
            .iter()
            .all(|u| u.starts_with("rediss://localhost:"))
    );
    let config = || {
        Config::cluster(cluster.urls())
            .tls_ca_pem(certs.ca_pem.clone())
            .watchdog_timeout(Duration::from_secs(1))
    };
    let a = LockManager::start(config()).await.expect("start over TLS");
    let b = LockManager::start(config()).await.expect("start over TLS");
    // Held past a few renewals (every third of a second) before it is released.
    exclude_and_wake_on_every_master(&cluster, (&a, &b), "tls:", Duration::from_millis(1200)).await;
    // Without the CA the certificates are refused, and the start says so.
    let untrusted =
        LockManager::start(Config::cluster(cluster.urls()).connect_timeout(Duration::from_secs(2)))
            .await;
    assert!(
        matches!(
            untrusted,
            Err(LockError::Tls {
                failure: lockman::TlsFailure::UntrustedCertificate,
                ..
            })
        ),
        "{untrusted:?}"
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronizers_work_on_every_master_by_sharded_pubsub() {
    let cluster = Cluster::start(3, 0);
    let a = manager(&cluster, Duration::from_millis(900)).await;
    let b = manager(&cluster, Duration::from_millis(900)).await;
    let mut held = Vec::new();
    for (name, owner) in one_name_per_master(&cluster, "sem:") {
        let (sa, sb) = (
            a.permit_semaphore(name.as_str()),
            b.permit_semaphore(name.as_str()),
        );
        assert!(sa.try_set_permits(1).await.unwrap());
        let guard = sa.acquire(1).await.unwrap();
        let mut raw = node_conn(&cluster, owner).await;
        let on_master: i64 = raw.zcard(format!("{{{name}}}:timeout")).await.unwrap();
        assert_eq!(on_master, 1, "{name}: the held set is on the name's master");
        let waiting = tokio::spawn(async move { sb.acquire(1).await });
        let channel = format!("redisson_sc:{{{name}}}");
        // Woken by the message: it waits on the channel before the release.
        wait::shard_subscribers(&mut support::raw(cluster.node(owner)), &channel, 1).await;
        let mut listener = listen(support::raw(cluster.node(owner)), "SSUBSCRIBE", &channel);
        let released = Instant::now();
        guard.release().await.unwrap();
        assert_eq!(next_message(&mut listener), ["smessage", &channel, "1"]);
        let taken = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .unwrap()
            .unwrap();
        assert!(
            released.elapsed() < Duration::from_secs(2),
            "{name}: woken by the message"
        );
        held.push(taken);
    }
    // Grants on three masters, renewed by slot past three watchdog timeouts.
    tokio::time::sleep(Duration::from_millis(2700)).await;
    for guard in &held {
        assert!(!guard.is_lost(), "renewed");
    }
    for guard in held {
        guard.release().await.unwrap();
    }

    // A latch opens a waiter on another manager; a latch name holding `{` is refused.
    let latch = a.count_down_latch("phase");
    assert!(latch.try_set_count(1).await.unwrap());
    let other = b.count_down_latch("phase");
    let waiting = tokio::spawn(async move { other.wait_for(Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    latch.count_down().await.unwrap();
    assert!(waiting.await.unwrap().unwrap());
    let before = cluster.total_keys();
    let err = a
        .count_down_latch("{tag}:phase")
        .try_set_count(1)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            LockError::InvalidArgument {
                what: "latch name",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(cluster.total_keys(), before, "nothing was written");
    a.shutdown().await;
    b.shutdown().await;
}

/// Client records on a cluster: every record and the index live in the slot of `{lockman}`,
/// so one read on that slot's master lists the managers, whichever masters their holds are on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_records_are_found_on_one_master_with_holds_on_every_master() {
    let cluster = Cluster::start(3, 0);
    let a = LockManager::start(
        Config::cluster(cluster.urls())
            .watchdog_timeout(Duration::from_secs(1))
            .client_name("billing"),
    )
    .await
    .unwrap();
    let names = one_name_per_master(&cluster, "rec");
    let mut guards = Vec::new();
    for (name, _) in &names {
        guards.push(a.lock(name).acquire().await.unwrap());
    }
    let reader = manager(&cluster, Duration::from_secs(30)).await;
    let mut seen;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        seen = reader.clients().await.unwrap();
        let held = seen
            .iter()
            .find(|c| c.service == "billing")
            .map_or(0, |c| c.holds.len());
        if held == names.len() || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let billing = seen
        .iter()
        .find(|c| c.service == "billing")
        .expect("listed");
    let mut held: Vec<&str> = billing.holds.iter().map(|h| h.name.as_str()).collect();
    held.sort_unstable();
    let mut want: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
    want.sort_unstable();
    assert_eq!(held, want);
    let owner = cluster.owner_of("lockman_client:{lockman}");
    for (_, port) in &names {
        let mut conn = node_conn(&cluster, *port).await;
        let records: Vec<String> = redis::cmd("KEYS")
            .arg("lockman_client:*")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            records.is_empty(),
            *port != owner,
            "node {port}: {records:?}"
        );
    }
    drop(guards);
    a.shutdown().await;
    reader.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// A cluster's holds watched (issue 59): one tracking connection per master; a foreign write to a
// held key on any master is known at once, through a resharding and a killed tracking
// connection, and lockman's own renewals are no loss. The managers use a watchdog timeout of
// 30 s (no renewal of a hold younger than 5 s, renewals every 10 s), so a loss reported within
// the bounds below was the watch's, not a renewal's.

const WATCHED: Duration = Duration::from_secs(30);
/// A loss known through the watch: generous (a loaded machine), far below a renewal's reach.
const WATCH_BOUND: Duration = Duration::from_secs(2);

/// Keys the node on `port` tracks for its clients (INFO stats `tracking_total_keys`).
fn tracked_on(cluster: &Cluster, port: u16) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut support::raw(cluster.node(port)))
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("tracking_total_keys:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits until the node on `port` tracks at least `n` keys (a hold there was checked on its
/// master's tracking connection).
async fn until_tracked_on(cluster: &Cluster, port: u16, n: u64) {
    assert!(
        support::wait::eventually(Duration::from_secs(10), || tracked_on(cluster, port) >= n).await,
        "no hold watched on {port}"
    );
}

/// How long `guard.lost()` takes to resolve from `since`, at most [`WATCH_BOUND`] from now.
async fn lost_since(guard: &lockman::LockGuard, since: Instant) -> Duration {
    tokio::time::timeout(WATCH_BOUND, guard.lost())
        .await
        .unwrap_or_else(|_| panic!("lost() did not resolve within {WATCH_BOUND:?}"));
    since.elapsed()
}

/// The id of lockman's tracking connection on the node on `port`.
fn tracking_client_id(cluster: &Cluster, port: u16) -> String {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut support::raw(cluster.node(port)))
        .expect("CLIENT LIST");
    list.lines()
        .find(|l| l.contains(" name=lockman-tracking "))
        .and_then(|l| l.strip_prefix("id="))
        .and_then(|l| l.split(' ').next())
        .expect("lockman's tracking connection on that master")
        .to_owned()
}

/// A foreign `DEL` of a held key, on each master in turn, is known at once: 10 rounds a
/// master, each a fresh hold watched, then deleted; the time from the `DEL` to `lost()` is
/// printed (p50, p99, max). (The break: a cluster not watched, as before: no loss known within
/// the bound, the hold being too young for a renewal.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_del_on_any_master_is_known_at_once() {
    let cluster = Cluster::start(3, 0);
    let mgr = manager(&cluster, WATCHED).await;
    let names = one_name_per_master(&cluster, "gone");
    let mut took = Vec::new();
    for round in 0..10 {
        for (name, port) in &names {
            let guard = mgr.lock(name).acquire().await.unwrap();
            until_tracked_on(&cluster, *port, 1).await;
            assert!(
                !guard.is_lost(),
                "round {round}: {name} lost before its DEL"
            );
            let mut conn = support::raw(cluster.node(*port));
            let deleting = Instant::now();
            let deleted: i64 = redis::cmd("DEL").arg(name).query(&mut conn).unwrap();
            assert_eq!(deleted, 1);
            took.push(lost_since(&guard, deleting).await);
            drop(guard);
        }
    }
    took.sort();
    let at = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
    eprintln!(
        "cluster, foreign DEL → lost(), {} rounds: p50 {:?}, p99 {:?}, max {:?}",
        took.len(),
        at(0.5),
        at(0.99),
        took[took.len() - 1]
    );
    mgr.shutdown().await;
}

/// A held key's slot moved to another master (`MIGRATE`, then `SETSLOT NODE`): the migration's
/// own `DEL` on the old master is an invalidation whose check is redirected (`ASK`, `MOVED`),
/// which is no loss; the watch then follows the slot, so that a `DEL` on the new master is
/// known at once. (The breaks: a redirected check taken for a loss; a slot map never read
/// again, whose checks keep going to the old master, and the new one never tracks the key.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resharded_hold_is_no_loss_and_still_watched_on_its_new_master() {
    let cluster = Cluster::start(3, 0);
    let mgr = manager(&cluster, WATCHED).await;
    let names = one_name_per_master(&cluster, "moved");
    let mut guards = Vec::new();
    for (name, port) in &names {
        guards.push(mgr.lock(name).acquire().await.unwrap());
        until_tracked_on(&cluster, *port, 1).await;
    }
    let (name, from) = names[0].clone();
    let to = names[1].1;
    let slot = cluster.slot_of(&name);
    cluster.begin_migration(slot, from, to);
    cluster.finish_migration(slot, from, to);
    cluster.wait_until_owner(&name, to, to, Duration::from_secs(10));
    // The new master tracks the moved key once the watch has followed it there (it tracks the
    // key of its own hold as well).
    until_tracked_on(&cluster, to, 2).await;
    for guard in &guards {
        assert!(!guard.is_lost(), "a resharding was taken for a loss");
    }
    let mut conn = support::raw(cluster.node(to));
    let deleting = Instant::now();
    let deleted: i64 = redis::cmd("DEL").arg(&name).query(&mut conn).unwrap();
    assert_eq!(deleted, 1, "the key moved to the new master");
    let took = lost_since(&guards[0], deleting).await;
    eprintln!("cluster, DEL after a resharding → lost() in {took:?}");
    assert!(!guards[1].is_lost() && !guards[2].is_lost());
    mgr.shutdown().await;
}

/// One master's tracking connection killed, and a held key there deleted before a new one can
/// read it (the invalidation is sent to nobody): the holds are read again at once and the
/// loss found; the holds on the other masters are no loss, and still watched after. (The
/// break: a closed connection of one master not noticed, or its holds not read again: the
/// loss waits for a renewal.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_tracking_connection_on_one_master_has_its_holds_read_again() {
    let cluster = Cluster::start(3, 0);
    let mgr = manager(&cluster, WATCHED).await;
    let names = one_name_per_master(&cluster, "cut");
    let mut guards = Vec::new();
    for (name, port) in &names {
        guards.push(mgr.lock(name).acquire().await.unwrap());
        until_tracked_on(&cluster, *port, 1).await;
    }
    let (name, port) = &names[0];
    let id = tracking_client_id(&cluster, *port);
    let (killed, exists): (i64, i64) = redis::pipe()
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(&id)
        .cmd("DEL")
        .arg(name)
        .ignore()
        .cmd("EXISTS")
        .arg(name)
        .query(&mut support::raw(cluster.node(*port)))
        .unwrap();
    assert_eq!((killed, exists), (1, 0));
    let took = lost_since(&guards[0], Instant::now()).await;
    eprintln!("cluster, DEL while a tracking connection was cut → lost() in {took:?}");
    assert!(!guards[1].is_lost() && !guards[2].is_lost());
    // The new connections watch the holds left.
    let (other, other_port) = &names[1];
    until_tracked_on(&cluster, *other_port, 1).await;
    let deleting = Instant::now();
    let deleted: i64 = redis::cmd("DEL")
        .arg(other)
        .query(&mut support::raw(cluster.node(*other_port)))
        .unwrap();
    assert_eq!(deleted, 1);
    lost_since(&guards[1], deleting).await;
    assert!(!guards[2].is_lost());
    mgr.shutdown().await;
}

/// Lockman's own renewals on a cluster (every 200 ms, holds on every master) are no loss, and
/// run on each master's tracking connection: counted by each master, `renew.lua` runs `EXISTS`
/// once per hold, `held.lua` (a check) `HEXISTS` alone, so the checks are the `HEXISTS` beyond
/// the `EXISTS`. (The break: renewals on the cluster connection, an invalidation and a check
/// after each.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_renewals_on_a_cluster_are_no_loss_and_cost_no_check() {
    let cluster = Cluster::start(3, 0);
    let mgr = manager(&cluster, Duration::from_millis(600)).await;
    let names = one_name_per_master(&cluster, "renewed");
    let mut guards = Vec::new();
    for (name, port) in &names {
        guards.push(mgr.lock(name).acquire().await.unwrap());
        until_tracked_on(&cluster, *port, 1).await;
    }
    // The first renewals have run on every master (their scripts are loaded).
    for (_, port) in &names {
        let mut conn = support::raw(cluster.node(*port));
        assert!(
            support::wait::eventually(Duration::from_secs(3), || support::commands::command_calls(
                &mut conn, "exists"
            ) >= 1)
            .await,
            "never renewed on {port}"
        );
        support::commands::reset_stats(&mut conn);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut total = (0, 0, 0);
    for (_, port) in &names {
        let mut conn = support::raw(cluster.node(*port));
        let renewals = support::commands::command_calls(&mut conn, "exists");
        let reads = support::commands::command_calls(&mut conn, "hexists");
        let scripts = support::commands::command_calls(&mut conn, "evalsha");
        let checks = reads.saturating_sub(renewals);
        eprintln!("master {port}: {renewals} renewals, {checks} checks, {scripts} EVALSHA");
        assert!(
            renewals >= 4,
            "renewals every 200 ms: {renewals} in 1.5 s on {port}"
        );
        // One check may come of a failure path (a renewal that failed on a busy machine is
        // retried on the cluster connection); the break costs one per renewal.
        assert!(
            checks <= 1,
            "{renewals} renewals, {checks} checks on {port}"
        );
        total = (total.0 + renewals, total.1 + checks, total.2 + scripts);
    }
    eprintln!(
        "cluster, own renewals: {} renewals, {} checks, {} EVALSHA in all",
        total.0, total.1, total.2
    );
    for guard in &guards {
        assert!(!guard.is_lost(), "a renewal was taken for a loss");
        assert!(
            guard.valid_until() > Instant::now(),
            "renewals not published"
        );
    }
    mgr.shutdown().await;
}

/// On a TLS cluster the tracking connections, made to each master directly (not through the
/// cluster client), carry the seeds' TLS settings and the config's CA: every master tracks its
/// hold's key, and a `DEL` there is known at once. (The break: a master's client built without
/// the CA or as plain TCP: no connection, no hold watched.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_clusters_holds_are_watched_on_every_master() {
    let certs = std::sync::Arc::new(support::certs::TestCerts::generate());
    let cluster = Cluster::start_tls(3, certs.clone());
    let config = Config::cluster(cluster.urls())
        .tls_ca_pem(certs.ca_pem.clone())
        .watchdog_timeout(WATCHED);
    let mgr = LockManager::start(config).await.expect("start over TLS");
    let names = one_name_per_master(&cluster, "tlswatch");
    let mut guards = Vec::new();
    for (name, port) in &names {
        guards.push(mgr.lock(name).acquire().await.unwrap());
        until_tracked_on(&cluster, *port, 1).await;
    }
    for ((name, port), guard) in names.iter().zip(&guards) {
        let deleting = Instant::now();
        let deleted: i64 = redis::cmd("DEL")
            .arg(name)
            .query(&mut support::raw(cluster.node(*port)))
            .unwrap();
        assert_eq!(deleted, 1);
        lost_since(guard, deleting).await;
    }
    mgr.shutdown().await;
}
