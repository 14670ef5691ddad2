//! Redisson 4.x parity, with the Java side played by `support::redisson`'s scripts, which
//! perform Redisson 4.4+'s read-lock and fair-lock operations with the keys and arguments the
//! Java client passes: a read hold's renewal renews only its own holder's holds, a read
//! release that leaves only expired readers wakes the writers, and a fair force unlock wakes the
//! head on its own channel (docs/protocol.md, "Read-write lock" and "Fair lock").

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lockman::{Config, LockManager};
use redis::Commands;
use support::redisson::{self as java, prefix_name, read_timeout_key};
use support::{RedisServer, commands::listen, commands::next_message, wait, wait::subscribed};

/// Java's holder: Redisson's `<client uuid>:<thread id>`.
const JAVA: &str = "6f1d2c3b-0a9e-4d8c-b7f6-5e4d3c2b1a09:1";

async fn manager(server: &RedisServer, watchdog: Duration) -> LockManager {
    LockManager::start(Config::new(server.url()).watchdog_timeout(watchdog))
        .await
        .expect("manager starts")
}

fn pttl(raw: &mut redis::Connection, key: &str) -> i64 {
    raw.pttl(key).unwrap()
}

fn hash(raw: &mut redis::Connection, key: &str) -> HashMap<String, String> {
    raw.hgetall(key).unwrap()
}

/// A Java read hold with a 20 s lease beside a lockman reader whose watchdog is 3 s: lockman's
/// renewals (every second) leave the Java hold's timeout key and the hash at the Java lease, and
/// after lockman's release a writer stays out while that lease runs. Before the fix each renewal
/// set every reader's timeout key to 3 s: the hash expired about 3 s after the release and the
/// writer got in beside the Java reader.
#[tokio::test]
async fn a_java_readers_longer_lease_is_not_cut_by_lockman_renewal() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (
        manager(&server, Duration::from_secs(3)).await,
        manager(&server, Duration::from_secs(3)).await,
    );
    let name = "doc";
    let java_key = read_timeout_key(name, JAVA, 1);
    assert_eq!(java::read_lock(&mut raw, name, JAVA, 20_000), None);
    let started = Instant::now();
    let rw = a.read_write_lock(name);
    let mine = rw.read().acquire().await.unwrap();
    let own_key = read_timeout_key(name, &rw.holder_id(), 1);

    // Renewal ticks every second: waits for two renewals of lockman's own hold (its timeout
    // key's PTTL goes back up), however late a loaded machine runs them.
    let mut last = pttl(&mut raw, &own_key);
    let mut renewals = 0;
    wait::until("two renewals of lockman's read hold", || {
        let now = pttl(&mut raw, &own_key);
        if now > last {
            renewals += 1;
        }
        last = now;
        renewals >= 2
    })
    .await;
    let own = pttl(&mut raw, &own_key);
    assert!(
        (1..=3_000).contains(&own),
        "lockman's own timeout key is renewed to its watchdog timeout: {own}"
    );
    let left = 20_000 - i64::try_from(started.elapsed().as_millis()).unwrap();
    let java_ttl = pttl(&mut raw, &java_key);
    assert!(
        java_ttl > left - 2_000 && java_ttl <= left,
        "the Java hold keeps its own lease ({left} ms left): {java_ttl}"
    );
    let hash_ttl = pttl(&mut raw, name);
    assert!(
        hash_ttl >= java_ttl - 50,
        "the hash lives as long as the Java hold: {hash_ttl} vs {java_ttl}"
    );

    mine.release().await.unwrap();
    assert_eq!(
        hash(&mut raw, name),
        HashMap::from([("mode".into(), "read".into()), (JAVA.into(), "1".into())])
    );
    let java_ttl = pttl(&mut raw, &java_key);
    let hash_ttl = pttl(&mut raw, name);
    assert!(java_ttl > 10_000, "Java hold after the release: {java_ttl}");
    assert!(
        (java_ttl - 100..=java_ttl + 100).contains(&hash_ttl),
        "after lockman's release the hash follows the Java hold: {hash_ttl} vs {java_ttl}"
    );
    // A writer waits past the 3 s the old renewal left: the Java reader is still inside.
    let writer = b.read_write_lock(name);
    let got = writer
        .write()
        .try_acquire_for(Duration::from_secs(5))
        .await
        .unwrap();
    assert!(
        got.is_none(),
        "a writer got in while the Java read lease still ran ({} ms left)",
        pttl(&mut raw, &java_key)
    );
    assert!(raw.exists::<_, bool>(&java_key).unwrap());

    // The Java reader's release frees it: deleted, `0` published, and the writer gets in.
    let waiting = tokio::spawn({
        let writer = writer.clone();
        async move {
            writer
                .write()
                .try_acquire_for(Duration::from_secs(20))
                .await
        }
    });
    // The writer waits on the channel, its attempts made, before the Java reader leaves.
    wait::subscribers(&mut raw, &prefix_name("redisson_rwlock", name), 1).await;
    wait::quiet(&mut raw).await;
    let freed = Instant::now();
    assert_eq!(java::read_unlock(&mut raw, name, JAVA), Some(1));
    let w = waiting.await.unwrap().unwrap().expect("the writer gets in");
    assert!(
        freed.elapsed() < Duration::from_secs(3),
        "{:?}",
        freed.elapsed()
    );
    assert_eq!(
        hash(&mut raw, name),
        HashMap::from([
            ("mode".into(), "write".into()),
            (format!("{}:write", writer.holder_id()), "1".into())
        ])
    );
    w.release().await.unwrap();
    a.shutdown().await;
    b.shutdown().await;
}

/// A dead Java reader (a 4 s lease, never renewed) beside a lockman reader whose watchdog is 6 s:
/// the Java hold expires at its lease although lockman renews its own meanwhile, and lockman's
/// final release, which leaves only that expired reader, deletes the hash and publishes `0`, so
/// that a waiting lockman writer gets in at once. Before the fix lockman's renewal kept the Java
/// hold alive (its timeout key renewed to 6 s), and the release left the hash for it and
/// published nothing: the writer waited for the hash to expire, 4 s or more.
#[tokio::test]
async fn a_dead_java_reader_runs_out_and_the_last_lockman_release_wakes_the_writer() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (
        manager(&server, Duration::from_secs(6)).await,
        manager(&server, Duration::from_secs(6)).await,
    );
    let name = "shelf";
    let java_key = read_timeout_key(name, JAVA, 1);
    assert_eq!(java::read_lock(&mut raw, name, JAVA, 4_000), None);
    let rw = a.read_write_lock(name);
    let mine = rw.read().acquire().await.unwrap();
    let writer = b.read_write_lock(name);
    let waiting = tokio::spawn({
        let writer = writer.clone();
        async move {
            writer
                .write()
                .try_acquire_for(Duration::from_secs(30))
                .await
        }
    });
    // lockman's hold is renewed (its first renewal comes 1-3 s after it was taken, then every
    // 2 s); the Java hold's lease (4 s) runs out all the same. Renewed with lockman's, it would
    // never run out: the wait's limit (10 s) is past its lease.
    wait::until("the dead Java reader's hold expired at its lease", || {
        pttl(&mut raw, &java_key) == -2
    })
    .await;
    assert!(pttl(&mut raw, &read_timeout_key(name, &rw.holder_id(), 1)) > 0);
    assert_eq!(
        hash(&mut raw, name),
        HashMap::from([
            ("mode".into(), "read".into()),
            (JAVA.into(), "1".into()),
            (rw.holder_id(), "1".into())
        ]),
        "the dead reader's field stays until a release finds it expired, as in Redisson"
    );
    assert!(!waiting.is_finished(), "the writer waits behind the reader");

    let channel = prefix_name("redisson_rwlock", name);
    let mut listener = listen(server.conn(), "SUBSCRIBE", &channel);
    let released = Instant::now();
    mine.release().await.unwrap();
    assert_eq!(next_message(&mut listener), ["message", &channel, "0"]);
    let w = waiting.await.unwrap().unwrap().expect("the writer gets in");
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "the writer was woken, not left to wait out a TTL: {:?}",
        released.elapsed()
    );
    assert_eq!(
        hash(&mut raw, name),
        HashMap::from([
            ("mode".into(), "write".into()),
            (format!("{}:write", writer.holder_id()), "1".into())
        ])
    );
    w.release().await.unwrap();
    a.shutdown().await;
    b.shutdown().await;
}

fn queue(raw: &mut redis::Connection, name: &str) -> Vec<String> {
    raw.lrange(prefix_name("redisson_lock_queue", name), 0, -1)
        .unwrap()
}

fn deadlines(raw: &mut redis::Connection, name: &str) -> Vec<String> {
    raw.zrange(prefix_name("redisson_lock_timeout", name), 0, -1)
        .unwrap()
}

/// lockman's fair force unlock with a lockman head waiting on another manager, behind a dead
/// Java waiter whose deadline has passed: the dead waiter is pruned, the head is woken on its
/// own channel and gets in at once (not at its TTL retry, 30 s away). Before the fix the force
/// unlock published on `redisson_lock__channel:{name}`, which no fair waiter hears.
#[tokio::test]
async fn a_fair_force_unlock_prunes_and_wakes_a_lockman_head() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (
        manager(&server, Duration::from_secs(30)).await,
        manager(&server, Duration::from_secs(30)).await,
    );
    let name = "till";
    let held = a.fair_lock(name).acquire().await.unwrap(); // 30 s watchdog lease
    // A Java waiter queues first, then lockman's behind it.
    assert!(java::fair_try_lock(&mut raw, name, JAVA, 30_000, 5_000).is_some());
    let head = b.fair_lock(name);
    let waiting = tokio::spawn({
        let head = head.clone();
        async move { head.try_acquire_for(Duration::from_secs(60)).await }
    });
    let mut probe = server.conn();
    let own_channel = format!(
        "{}:{}",
        prefix_name("redisson_lock__channel", name),
        head.holder_id()
    );
    assert!(subscribed(&mut probe, &own_channel, Duration::from_secs(5)).await);
    assert_eq!(
        queue(&mut raw, name),
        vec![JAVA.to_owned(), head.holder_id()]
    );
    // The Java waiter dies: its deadline passes (set in the past, as time passing would).
    let _: () = raw
        .zadd(prefix_name("redisson_lock_timeout", name), JAVA, 1)
        .unwrap();

    let forced = Instant::now();
    assert!(a.fair_lock(name).force_unlock().await.unwrap());
    let g = waiting.await.unwrap().unwrap().expect("the head gets in");
    assert!(
        forced.elapsed() < Duration::from_secs(3),
        "the head was woken, not left to its TTL retry: {:?}",
        forced.elapsed()
    );
    assert_eq!(
        hash(&mut raw, name),
        HashMap::from([(head.holder_id(), "1".into())])
    );
    assert!(queue(&mut raw, name).is_empty());
    assert!(deadlines(&mut raw, name).is_empty());
    drop(held); // its release finds the hold gone
    g.release().await.unwrap();
    assert!(!raw.exists::<_, bool>(name).unwrap());
    a.shutdown().await;
    b.shutdown().await;
}

/// lockman's fair force unlock with a Java head: `0` arrives on the head's own channel
/// (`redisson_lock__channel:{name}:<head>`), where Redisson's waiter listens, and the head's
/// next attempt gets in. And the other way round, Redisson's force unlock wakes a lockman head.
/// Before the fix nothing was published on the head's channel.
#[tokio::test]
async fn a_fair_force_unlock_wakes_a_java_head_on_its_own_channel() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server, Duration::from_secs(30)).await;
    let name = "desk";
    let held = mgr.fair_lock(name).acquire().await.unwrap();
    assert!(java::fair_try_lock(&mut raw, name, JAVA, 30_000, 10_000).is_some());
    let head_channel = format!("{}:{JAVA}", prefix_name("redisson_lock__channel", name));
    let mut listener = listen(server.conn(), "SUBSCRIBE", &head_channel);

    assert!(mgr.fair_lock(name).force_unlock().await.unwrap());
    assert_eq!(next_message(&mut listener), ["message", &head_channel, "0"]);
    assert_eq!(
        java::fair_try_lock(&mut raw, name, JAVA, 30_000, 10_000),
        None,
        "the Java head gets in"
    );
    assert!(queue(&mut raw, name).is_empty());
    drop(held);

    // Redisson's force unlock (as `support::redisson` plays it) wakes a lockman head on its channel.
    let other = manager(&server, Duration::from_secs(30)).await;
    let head = other.fair_lock(name);
    let waiting = tokio::spawn({
        let head = head.clone();
        async move { head.try_acquire_for(Duration::from_secs(60)).await }
    });
    let own_channel = format!(
        "{}:{}",
        prefix_name("redisson_lock__channel", name),
        head.holder_id()
    );
    let mut probe = server.conn();
    assert!(subscribed(&mut probe, &own_channel, Duration::from_secs(5)).await);
    assert_eq!(queue(&mut raw, name), vec![head.holder_id()]);
    let forced = Instant::now();
    assert!(java::fair_force_unlock(&mut raw, name));
    let g = waiting
        .await
        .unwrap()
        .unwrap()
        .expect("the lockman head gets in");
    assert!(
        forced.elapsed() < Duration::from_secs(3),
        "{:?}",
        forced.elapsed()
    );
    g.release().await.unwrap();
    assert!(!raw.exists::<_, bool>(name).unwrap());
    mgr.shutdown().await;
    other.shutdown().await;
}
