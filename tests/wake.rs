//! The wake rule of the semaphores (issue 35), against a real Redis with two managers: a message
//! of `m` wakes up to `m` parked waiters whatever each wants, and each tries again. A permit
//! semaphore's messages are not always the number free (`add_permits(d)` publishes `d`, Java's
//! `tryRelease(List)` the number released), so a waiter wanting more than a message's number
//! must still be woken when what is now free is enough for it.
//!
//! Each test parks manager B's waiter (its wait is 10 s), frees permits another way (manager A,
//! or the Java side played by `support/redisson.rs`), and asserts that the waiter has its
//! permits within 1.5 s of the moment they were free, then the exact Redis state.

mod support;

use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockManager, PermitGuard};
use redis::Commands;
use support::{RedisServer, redisson};
use tokio::task::JoinHandle;

/// The waiter's own wait: being answered at its deadline is far outside [`PROMPT`].
const WAIT: Duration = Duration::from_secs(10);
/// How soon after the permits are free the waiter must have them (a message and two round
/// trips take milliseconds; generous for a loaded machine).
const PROMPT: Duration = Duration::from_millis(1500);

type Waiter = JoinHandle<Result<Option<PermitGuard>, LockError>>;

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url()))
        .await
        .expect("manager starts")
}

fn get(raw: &mut redis::Connection, key: &str) -> Option<String> {
    raw.get(key).unwrap()
}

fn held(raw: &mut redis::Connection, name: &str) -> i64 {
    raw.zcard(format!("{{{name}}}:timeout")).unwrap()
}

/// Returns once the spawned `waiter` of `name` is parked: its attempt fell short, it subscribed
/// the channel, and its attempt after the subscription is done.
async fn parked(raw: &mut redis::Connection, name: &str, waiter: &Waiter) {
    let channel = format!("redisson_sc:{{{name}}}");
    assert!(support::wait::subscribed(raw, &channel, Duration::from_secs(5)).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the waiter must wait: too few free");
}

/// The waiter's permits, asserting it had them within [`PROMPT`] of `freed`.
async fn woken(waiter: Waiter, freed: Instant, how: &str) -> PermitGuard {
    let guard = tokio::time::timeout(WAIT + Duration::from_secs(5), waiter)
        .await
        .expect("answered by its deadline")
        .expect("no panic")
        .expect("no error")
        .expect("permits, not a time-out");
    let took = freed.elapsed();
    assert!(
        took < PROMPT,
        "{how}: the waiter had its permits {took:?} after they were free (its wait is {WAIT:?})"
    );
    guard
}

fn permit_waiter(mgr: &LockManager, name: &str, wants: u32) -> Waiter {
    let sem = mgr.permit_semaphore(name);
    tokio::spawn(async move { sem.try_acquire_for(wants, WAIT).await })
}

#[tokio::test]
async fn add_permits_of_1_wakes_a_waiter_for_2() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let sem = a.permit_semaphore("add");
    assert!(sem.try_set_permits(2).await.unwrap());
    let one = sem.acquire(1).await.unwrap();
    let waiter = permit_waiter(&b, "add", 2);
    parked(&mut raw, "add", &waiter).await;

    assert_eq!(
        sem.add_permits(1).await.unwrap(),
        2,
        "2 free; the message is 1"
    );
    let freed = Instant::now();
    let two = woken(waiter, freed, "add_permits(1)").await;
    assert_eq!(two.count(), 2);
    assert_eq!(get(&mut raw, "add").as_deref(), Some("0"));
    assert_eq!(held(&mut raw, "add"), 3);
    one.release().await.unwrap();
    two.release().await.unwrap();
    assert_eq!(get(&mut raw, "add").as_deref(), Some("3"));
    assert_eq!(held(&mut raw, "add"), 0);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_release_of_one_id_wakes_a_waiter_for_2() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let sem = a.permit_semaphore("one");
    assert!(sem.try_set_permits(2).await.unwrap());
    let one = sem.acquire(1).await.unwrap();
    let waiter = permit_waiter(&b, "one", 2);
    parked(&mut raw, "one", &waiter).await;

    one.release().await.unwrap();
    let freed = Instant::now();
    let two = woken(waiter, freed, "a release of one id").await;
    assert_eq!(two.count(), 2);
    assert_eq!(get(&mut raw, "one").as_deref(), Some("0"));
    assert_eq!(held(&mut raw, "one"), 2);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_release_of_several_ids_wakes_a_waiter_for_more() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let sem = a.permit_semaphore("many");
    assert!(sem.try_set_permits(3).await.unwrap());
    let two = sem.acquire(2).await.unwrap();
    assert_eq!(two.ids().len(), 2);
    let waiter = permit_waiter(&b, "many", 3);
    parked(&mut raw, "many", &waiter).await;

    two.release().await.unwrap();
    let freed = Instant::now();
    let three = woken(waiter, freed, "a release of two ids").await;
    assert_eq!(three.count(), 3);
    assert_eq!(get(&mut raw, "many").as_deref(), Some("0"));
    assert_eq!(held(&mut raw, "many"), 3);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_lease_that_ends_lets_a_waiter_for_2_in() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let sem = a.permit_semaphore("lease");
    assert!(sem.try_set_permits(2).await.unwrap());
    let lease = Duration::from_secs(1);
    // The lease runs from when the script ran, after the request was sent and before its reply
    // came: the permit is free no earlier than a lease after the send.
    let sent = Instant::now();
    let leased = sem.acquire_with_lease(1, lease).await.unwrap();
    let freed = sent + lease;
    let waiter = permit_waiter(&b, "lease", 2);
    parked(&mut raw, "lease", &waiter).await;

    let two = woken(waiter, freed, "a lease that ended").await;
    assert!(Instant::now() >= freed, "taken before the lease ended");
    assert_eq!(two.count(), 2);
    assert_eq!(get(&mut raw, "lease").as_deref(), Some("0"));
    assert_eq!(held(&mut raw, "lease"), 2);
    tokio::time::timeout(Duration::from_secs(2), leased.lost())
        .await
        .expect("the guard learns its lease ended");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn try_set_permits_wakes_a_waiter_for_2() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let waiter = permit_waiter(&b, "set", 2);
    parked(&mut raw, "set", &waiter).await;

    assert!(a.permit_semaphore("set").try_set_permits(2).await.unwrap());
    let freed = Instant::now();
    let two = woken(waiter, freed, "try_set_permits(2)").await;
    assert_eq!(two.count(), 2);
    assert_eq!(get(&mut raw, "set").as_deref(), Some("0"));
    assert_eq!(held(&mut raw, "set"), 2);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn drain_then_add_wakes_a_waiter_for_2() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let sem = a.permit_semaphore("drain");
    assert!(sem.try_set_permits(2).await.unwrap());
    let one = sem.acquire(1).await.unwrap();
    let waiter = permit_waiter(&b, "drain", 2);
    parked(&mut raw, "drain", &waiter).await;

    assert_eq!(sem.drain().await.unwrap(), 1);
    // 1 free again: the message (the new free count, 1) wakes the waiter, which falls short.
    one.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The drained permit comes back: 2 free; the message is 1, the permits added.
    assert_eq!(sem.add_permits(1).await.unwrap(), 2);
    let freed = Instant::now();
    let two = woken(waiter, freed, "drain, then add_permits(1)").await;
    assert_eq!(two.count(), 2);
    assert_eq!(get(&mut raw, "drain").as_deref(), Some("0"));
    assert_eq!(held(&mut raw, "drain"), 2);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn java_add_permits_of_1_wakes_a_lockman_waiter_for_2() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let b = manager(&server).await;
    assert!(redisson::semaphore_try_set(&mut raw, "jadd", 2));
    let java_id = [3u8; 16];
    assert!(redisson::permit_try_acquire(
        &mut raw, "jadd", java_id, None
    ));
    let waiter = permit_waiter(&b, "jadd", 2);
    parked(&mut raw, "jadd", &waiter).await;

    assert_eq!(redisson::permit_add_permits(&mut raw, "jadd", 1), 2);
    let freed = Instant::now();
    let two = woken(waiter, freed, "Java's addPermits(1)").await;
    assert_eq!(two.count(), 2);
    assert_eq!(get(&mut raw, "jadd").as_deref(), Some("0"));
    assert_eq!(held(&mut raw, "jadd"), 3, "Java's permit and lockman's two");
    b.shutdown().await;
}

#[tokio::test]
async fn java_release_of_a_list_of_ids_wakes_a_lockman_waiter_for_more() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let b = manager(&server).await;
    assert!(redisson::semaphore_try_set(&mut raw, "jlist", 3));
    let ids = [[4u8; 16], [5u8; 16]];
    for id in ids {
        assert!(redisson::permit_try_acquire(&mut raw, "jlist", id, None));
    }
    let waiter = permit_waiter(&b, "jlist", 3);
    parked(&mut raw, "jlist", &waiter).await;

    assert_eq!(redisson::permit_release_many(&mut raw, "jlist", &ids), 2);
    let freed = Instant::now();
    let three = woken(waiter, freed, "Java's tryRelease(List) of 2 ids").await;
    assert_eq!(three.count(), 3);
    assert_eq!(get(&mut raw, "jlist").as_deref(), Some("0"));
    assert_eq!(held(&mut raw, "jlist"), 3);
    b.shutdown().await;
}

#[tokio::test]
async fn a_plain_semaphore_wakes_a_waiter_for_2_on_a_release_and_on_add_permits() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let sem = a.semaphore("plain");
    assert!(sem.try_set_permits(2).await.unwrap());
    for add in [false, true] {
        let one = sem.acquire(1).await.unwrap();
        let waiter = {
            let sem = b.semaphore("plain");
            tokio::spawn(async move { sem.try_acquire_for(2, WAIT).await })
        };
        parked(&mut raw, "plain", &waiter).await;
        let freed = if add {
            one.forget();
            assert_eq!(sem.add_permits(1).await.unwrap(), 2);
            Instant::now()
        } else {
            one.release().await.unwrap();
            Instant::now()
        };
        let two = woken(
            waiter,
            freed,
            if add { "add_permits(1)" } else { "release" },
        )
        .await;
        assert_eq!(get(&mut raw, "plain").as_deref(), Some("0"));
        two.release().await.unwrap();
        assert_eq!(get(&mut raw, "plain").as_deref(), Some("2"));
    }
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_woken_waiter_that_falls_short_lets_in_one_that_fits_what_it_found() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let sem = a.permit_semaphore("pass");
    assert!(sem.try_set_permits(3).await.unwrap());
    let two = sem.acquire(2).await.unwrap();
    let five = permit_waiter(&b, "pass", 5);
    parked(&mut raw, "pass", &five).await;
    let waiter = permit_waiter(&b, "pass", 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished());

    // 2 free; the message is 1, which neither waiter's wants fit into: the first in arrival
    // order, the waiter for 5, is woken, and finds 2 free.
    assert_eq!(sem.add_permits(1).await.unwrap(), 2);
    let freed = Instant::now();
    let got = woken(waiter, freed, "the waiter for 2 behind one for 5").await;
    assert_eq!(got.count(), 2);
    assert_eq!(get(&mut raw, "pass").as_deref(), Some("0"));
    assert_eq!(held(&mut raw, "pass"), 4);
    assert!(!five.is_finished(), "5 were never free");
    drop((two, got));
    b.shutdown().await;
    a.shutdown().await;
    let _ = five.await;
}

#[tokio::test]
async fn a_message_of_1_costs_one_attempt_with_200_waiters_for_2() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let (a, b) = (manager(&server).await, manager(&server).await);
    // Loads the add script: a first EVALSHA on a fresh server misses.
    a.permit_semaphore("warm").add_permits(1).await.unwrap();
    let sem = a.permit_semaphore("herd");
    assert!(sem.try_set_permits(2).await.unwrap());
    // A lease far away: no renewal and no waiter's timer within the test.
    let _one = sem
        .acquire_with_lease(1, Duration::from_secs(120))
        .await
        .unwrap();
    let waiters: Vec<_> = (0..200)
        .map(|_| {
            let sem = b.permit_semaphore("herd");
            tokio::spawn(async move { sem.acquire(2).await })
        })
        .collect();
    assert!(
        support::wait::subscribed(&mut raw, "redisson_sc:{herd}", Duration::from_secs(5)).await
    );
    support::wait::quiet(&mut raw).await;

    assert_eq!(sem.add_permits(1).await.unwrap(), 2);
    assert!(
        support::wait::eventually(WAIT, || waiters.iter().any(|w| w.is_finished())).await,
        "add_permits(1) woke nobody"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls = support::commands::command_calls(&mut raw, "evalsha");
    // The add, and one attempt of the one waiter woken; nothing else while that one holds.
    assert!(
        calls <= 3,
        "{calls} script calls for a message of 1 with 200 waiters"
    );
    assert_eq!(waiters.iter().filter(|w| w.is_finished()).count(), 1);
    assert_eq!(get(&mut raw, "herd").as_deref(), Some("0"));
    assert_eq!(held(&mut raw, "herd"), 3);
    b.shutdown().await;
    a.shutdown().await;
    for w in waiters {
        let _ = w.await;
    }
}
