//! The synchronizer verbs Redisson added after 3.24, against a real Redis, with the Java side
//! played by `support::redisson`: `RSemaphore.trySetPermits(permits, ttl)` (3.29),
//! `RSemaphore.releaseIfExists` (4.0), `RPermitExpirableSemaphore.getLeaseTime(id)` and its
//! all-or-nothing `tryRelease(List)` (3.41). Exact keys, TTLs and messages after each call, and
//! waking across the two sides (docs/protocol.md, "Semaphore", "Permit semaphore").

mod support;

use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockManager, PermitLease};
use redis::Commands;
use support::{RedisServer, commands::listen, commands::next_message, redisson, wait::subscribed};

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url()))
        .await
        .expect("manager starts")
}

fn get(raw: &mut redis::Connection, key: &str) -> Option<String> {
    raw.get(key).unwrap()
}

fn pttl(raw: &mut redis::Connection, key: &str) -> i64 {
    raw.pttl(key).unwrap()
}

fn held(raw: &mut redis::Connection, name: &str) -> Vec<Vec<u8>> {
    raw.zrange(format!("{{{name}}}:timeout"), 0, -1).unwrap()
}

/// Publishes a marker on `channel` and asserts that it is the next message `listener` hears:
/// nothing else was published before it.
fn nothing_published(raw: &mut redis::Connection, listener: &mut redis::Connection, channel: &str) {
    let _: i64 = raw.publish(channel, "marker").unwrap();
    assert_eq!(next_message(listener), ["message", channel, "marker"]);
}

fn hex(id: [u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// Waits until a waiter subscribed to `name`'s channel, then until its attempt after that is
/// done (no script runs for 200 ms): it is parked, and only a message or its deadline wakes it.
async fn parked(raw: &mut redis::Connection, name: &str) {
    let channel = format!("redisson_sc:{{{name}}}");
    assert!(subscribed(raw, &channel, Duration::from_secs(5)).await);
    support::wait::quiet(raw).await;
}

#[tokio::test]
async fn try_set_permits_with_ttl_is_redissons() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mut heard = listen(server.conn(), "SUBSCRIBE", "redisson_sc:{ttl}");
    let mgr = manager(&server).await;
    let sem = mgr.semaphore("ttl");

    assert!(
        sem.try_set_permits_with_ttl(3, Duration::from_secs(10))
            .await
            .unwrap()
    );
    assert_eq!(get(&mut raw, "ttl").as_deref(), Some("3"));
    let left = pttl(&mut raw, "ttl");
    assert!((8_000..=10_000).contains(&left), "SET … PX 10000: {left}");
    assert_eq!(
        next_message(&mut heard),
        ["message", "redisson_sc:{ttl}", "3"]
    );
    // Set already: nothing changes, nothing published.
    assert!(
        !sem.try_set_permits_with_ttl(5, Duration::from_secs(60))
            .await
            .unwrap()
    );
    assert!(!sem.try_set_permits(5).await.unwrap());
    assert_eq!(get(&mut raw, "ttl").as_deref(), Some("3"));
    assert!(pttl(&mut raw, "ttl") <= left);
    nothing_published(&mut raw, &mut heard, "redisson_sc:{ttl}");
    // Java's refuses a set semaphore too, and lockman's a Java-set one.
    assert!(!redisson::semaphore_try_set_with_ttl(
        &mut raw, "ttl", 7, 5_000
    ));
    assert!(redisson::semaphore_try_set_with_ttl(
        &mut raw, "java", 2, 5_000
    ));
    assert!(
        !mgr.semaphore("java")
            .try_set_permits_with_ttl(9, Duration::from_secs(1))
            .await
            .unwrap()
    );
    assert_eq!(get(&mut raw, "java").as_deref(), Some("2"));

    for (permits, ttl) in [(0, Duration::from_secs(1)), (1, Duration::ZERO)] {
        let refused = sem.try_set_permits_with_ttl(permits, ttl).await;
        assert!(
            matches!(refused, Err(LockError::InvalidArgument { .. })),
            "{permits} permits for {ttl:?}: {refused:?}"
        );
    }
    let _: () = raw.hset("hash", "f", "1").unwrap();
    assert!(matches!(
        mgr.semaphore("hash")
            .try_set_permits_with_ttl(1, Duration::from_secs(1))
            .await,
        Err(LockError::WrongType { .. })
    ));
    mgr.shutdown().await;
}

/// A lockman waiter parked on a semaphore never set is woken by Java's trySetPermits(ttl); once
/// the key expires, releaseIfExists (either side's) leaves it missing where release recreates it.
#[tokio::test]
async fn release_if_exists_leaves_an_expired_semaphore_missing() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let sem = mgr.semaphore("expiring");
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.try_acquire_for(1, Duration::from_secs(20)).await })
    };
    parked(&mut raw, "expiring").await;
    assert!(!waiter.is_finished());
    let set = Instant::now();
    assert!(redisson::semaphore_try_set_with_ttl(
        &mut raw, "expiring", 2, 1_500
    ));
    let guard = waiter.await.unwrap().unwrap().expect("woken by Java's set");
    assert!(
        set.elapsed() < Duration::from_secs(3),
        "{:?}",
        set.elapsed()
    );
    assert_eq!(get(&mut raw, "expiring").as_deref(), Some("1"));
    guard.forget();

    // The key expires with its TTL; a late release must not bring the semaphore back.
    assert!(
        support::wait::eventually(Duration::from_secs(5), || !raw
            .exists::<_, bool>("expiring")
            .unwrap())
        .await
    );
    let mut heard = listen(server.conn(), "SUBSCRIBE", "redisson_sc:{expiring}");
    assert!(!sem.release_if_exists(1).await.unwrap());
    assert!(!redisson::semaphore_release_if_exists(
        &mut raw, "expiring", 1
    ));
    assert!(!raw.exists::<_, bool>("expiring").unwrap());
    nothing_published(&mut raw, &mut heard, "redisson_sc:{expiring}");
    assert!(!sem.release_if_exists(0).await.unwrap(), "0 permits: false");

    // On a semaphore that exists: INCRBY and the new count published, as release(n).
    assert!(sem.try_set_permits(1).await.unwrap());
    assert_eq!(
        next_message(&mut heard),
        ["message", "redisson_sc:{expiring}", "1"]
    );
    assert!(sem.release_if_exists(2).await.unwrap());
    assert_eq!(get(&mut raw, "expiring").as_deref(), Some("3"));
    assert_eq!(
        next_message(&mut heard),
        ["message", "redisson_sc:{expiring}", "3"]
    );

    // Java's releaseIfExists wakes a lockman waiter.
    let all = sem.acquire(3).await.unwrap();
    all.forget();
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.try_acquire_for(1, Duration::from_secs(20)).await })
    };
    parked(&mut raw, "expiring").await;
    let released = Instant::now();
    assert!(redisson::semaphore_release_if_exists(
        &mut raw, "expiring", 1
    ));
    let one = waiter
        .await
        .unwrap()
        .unwrap()
        .expect("woken by Java's release");
    assert!(released.elapsed() < Duration::from_secs(3));
    assert_eq!(get(&mut raw, "expiring").as_deref(), Some("0"));
    one.forget();
    mgr.shutdown().await;
}

#[tokio::test]
async fn lease_time_is_getleasetimes() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await; // watchdog 30 s
    let sem = mgr.permit_semaphore("pl");
    assert!(sem.try_set_permits(4).await.unwrap());

    let leased = sem
        .acquire_with_lease(1, Duration::from_secs(10))
        .await
        .unwrap();
    let id = leased.ids()[0].clone();
    match sem.lease_time(&id).await.unwrap() {
        Some(PermitLease::Expires(left)) => assert!(
            left > Duration::from_secs(8) && left <= Duration::from_secs(10),
            "{left:?}"
        ),
        other => panic!("a 10 s lease: {other:?}"),
    }
    let raw_id: [u8; 16] = held(&mut raw, "pl")[0].clone().try_into().unwrap();
    assert_eq!(hex(raw_id), id);
    let java_left = redisson::permit_lease_time(&mut raw, "pl", raw_id);
    assert!((8_000..=10_000).contains(&java_left), "{java_left}");

    // A renewed lockman permit: its lease is the watchdog timeout.
    let renewed = sem.acquire(1).await.unwrap();
    match sem.lease_time(&renewed.ids()[0]).await.unwrap() {
        Some(PermitLease::Expires(left)) => assert!(
            left > Duration::from_secs(20) && left <= Duration::from_secs(30),
            "{left:?}"
        ),
        other => panic!("a renewed permit: {other:?}"),
    }
    // A Java permit without a lease: -1, NoLease.
    let java = [7u8; 16];
    assert!(redisson::permit_try_acquire(&mut raw, "pl", java, None));
    assert_eq!(
        sem.lease_time(&hex(java)).await.unwrap(),
        Some(PermitLease::NoLease)
    );
    assert_eq!(redisson::permit_lease_time(&mut raw, "pl", java), -1);
    // Unknown: None (Java: 0, and it throws).
    let unknown = [9u8; 16];
    assert_eq!(sem.lease_time(&hex(unknown)).await.unwrap(), None);
    assert_eq!(redisson::permit_lease_time(&mut raw, "pl", unknown), 0);

    // An expired permit counts as not held, and the call reclaims it (publishing the count).
    let short = sem
        .acquire_with_lease(1, Duration::from_millis(200))
        .await
        .unwrap();
    let short_id = short.ids()[0].clone();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(get(&mut raw, "pl").as_deref(), Some("0"));
    let mut heard = listen(server.conn(), "SUBSCRIBE", "redisson_sc:{pl}");
    assert_eq!(sem.lease_time(&short_id).await.unwrap(), None);
    assert_eq!(get(&mut raw, "pl").as_deref(), Some("1"), "reclaimed");
    assert_eq!(held(&mut raw, "pl").len(), 3);
    assert_eq!(
        next_message(&mut heard),
        ["message", "redisson_sc:{pl}", "1"]
    );

    for bad in ["", "xyz", &"g".repeat(32), &"0".repeat(31)] {
        assert!(
            matches!(
                sem.lease_time(bad).await,
                Err(LockError::InvalidArgument { .. })
            ),
            "{bad:?}"
        );
    }
    drop((leased, renewed));
    mgr.shutdown().await;
}

#[tokio::test]
async fn release_ids_is_all_or_nothing_and_publishes_the_number_released() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let sem = a.permit_semaphore("rl");
    assert!(sem.try_set_permits(5).await.unwrap());
    let (x, y, z) = ([1u8; 16], [2u8; 16], [3u8; 16]);
    assert!(redisson::permit_try_acquire(&mut raw, "rl", x, None));
    assert!(redisson::permit_try_acquire(&mut raw, "rl", y, None));
    assert!(redisson::permit_try_acquire(&mut raw, "rl", z, Some(200)));
    tokio::time::sleep(Duration::from_millis(400)).await; // z has expired, unreclaimed
    let mut heard = listen(server.conn(), "SUBSCRIBE", "redisson_sc:{rl}");

    // One id not held, or expired: nothing changes, nothing is published, not even the reclaim.
    for ids in [vec![hex(x), hex([9u8; 16])], vec![hex(x), hex(z)]] {
        assert!(!sem.release_ids(&ids).await.unwrap(), "{ids:?}");
        assert_eq!(held(&mut raw, "rl").len(), 3);
        assert_eq!(get(&mut raw, "rl").as_deref(), Some("2"));
    }
    nothing_published(&mut raw, &mut heard, "redisson_sc:{rl}");

    // All held: the expired z is reclaimed (3 free, published), then x and y go and `2` — the
    // number released, not the free count — is published.
    assert!(sem.release_ids(&[hex(x), hex(y)]).await.unwrap());
    assert!(held(&mut raw, "rl").is_empty());
    assert_eq!(get(&mut raw, "rl").as_deref(), Some("5"));
    assert_eq!(
        next_message(&mut heard),
        ["message", "redisson_sc:{rl}", "3"]
    );
    assert_eq!(
        next_message(&mut heard),
        ["message", "redisson_sc:{rl}", "2"]
    );

    // A guard's ids given back this way: the guard then finds them gone.
    let guard = sem.acquire(5).await.unwrap();
    let waiter = {
        let sem = b.permit_semaphore("rl");
        tokio::spawn(async move { sem.try_acquire_for(2, Duration::from_secs(20)).await })
    };
    parked(&mut raw, "rl").await;
    assert!(!waiter.is_finished());
    let some: Vec<String> = guard.ids().into_iter().take(2).collect();
    let released = Instant::now();
    assert!(sem.release_ids(&some).await.unwrap());
    let two = waiter
        .await
        .unwrap()
        .unwrap()
        .expect("woken by the release");
    assert!(released.elapsed() < Duration::from_secs(3));
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotHeld { .. })
    ));
    two.release().await.unwrap();
    assert_eq!(get(&mut raw, "rl").as_deref(), Some("5"));

    let none: [&str; 0] = [];
    assert!(matches!(
        sem.release_ids(&none).await,
        Err(LockError::InvalidArgument { .. })
    ));
    a.shutdown().await;
    b.shutdown().await;
}
