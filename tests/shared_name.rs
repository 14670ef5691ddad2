//! One name through several kinds in one manager: each kind has an actor of its own, and the
//! kinds that share a name's channel (the reentrant, fenced and non-reentrant locks and the
//! election of one name on `redisson_lock__channel:{name}`; the semaphore and the permit
//! semaphore on `redisson_sc:{name}`) must all hear its messages. Every pair of them waits in
//! one manager behind another manager's hold; once it is released, both are served one after
//! the other, each woken by the release before it, long before the retry at the holder's TTL
//! (30 s) that a deaf waiter falls back on.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockman::{Config, LockManager};
use support::RedisServer;

/// Far below the 30 s watchdog timeout a deaf waiter would wait out, far above a loaded
/// machine's round trips.
const WOKEN_WITHIN: Duration = Duration::from_secs(8);

#[derive(Clone, Copy, Debug)]
enum Kind {
    Lock,
    Fenced,
    NonReentrant,
    Election,
}

const LOCK_KINDS: [Kind; 4] = [Kind::Lock, Kind::Fenced, Kind::NonReentrant, Kind::Election];

/// Every command the server runs, as `MONITOR` prints it, gathered by a thread.
struct Monitor(Arc<Mutex<Vec<String>>>);

impl Monitor {
    fn start(server: &RedisServer) -> Self {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let mut conn = server.conn();
        redis::cmd("MONITOR").exec(&mut conn).expect("MONITOR");
        let seen = lines.clone();
        std::thread::spawn(move || {
            while let Ok(value) = conn.recv_response() {
                if let Ok(line) = redis::from_redis_value::<String>(value) {
                    seen.lock().unwrap().push(line);
                }
            }
        });
        Self(lines)
    }

    /// How many `SUBSCRIBE channel` the server has run.
    fn subscribes(&self, channel: &str) -> usize {
        let wanted = format!("\"SUBSCRIBE\" \"{channel}\"");
        let lines = self.0.lock().unwrap();
        lines.iter().filter(|l| l.ends_with(&wanted)).count()
    }

    /// Waits (bounded) until `channel` was subscribed `n` times: each listening actor
    /// subscribes it once, after its route is in place.
    async fn wait_subscribes(&self, channel: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.subscribes(channel) < n {
            assert!(
                Instant::now() < deadline,
                "{channel} subscribed {} times, not {n}",
                self.subscribes(channel)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Waits for the lock `name` as `kind`, counts the section (exclusion), and releases at once.
async fn take_and_release(mgr: &LockManager, kind: Kind, name: &str, inside: &AtomicBool) {
    let enter = || assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
    let leave = || inside.store(false, Ordering::SeqCst);
    match kind {
        Kind::Lock | Kind::NonReentrant => {
            let lock = match kind {
                Kind::Lock => mgr.lock(name),
                _ => mgr.non_reentrant_lock(name),
            };
            let guard = lock.acquire().await.unwrap();
            enter();
            leave();
            guard.release().await.unwrap();
        }
        Kind::Fenced => {
            let guard = mgr.fenced_lock(name).acquire().await.unwrap();
            enter();
            leave();
            guard.release().await.unwrap();
        }
        Kind::Election => {
            let lead = mgr.election(name).campaign().await.unwrap();
            enter();
            leave();
            lead.resign().await.unwrap();
        }
    }
}

#[tokio::test]
async fn every_pair_of_lock_kinds_on_one_name_is_woken_by_messages() {
    let server = RedisServer::start();
    let monitor = Monitor::start(&server);
    let waiting = LockManager::start(Config::new(server.url())).await.unwrap();
    let holding = LockManager::start(Config::new(server.url())).await.unwrap();
    for (i, &first) in LOCK_KINDS.iter().enumerate() {
        for &second in &LOCK_KINDS[i + 1..] {
            let name = format!("shared-{first:?}-{second:?}");
            let channel = format!("redisson_lock__channel:{{{name}}}");
            let held = holding.lock(name.as_str()).acquire().await.unwrap();
            let inside = AtomicBool::new(false);
            let served = AtomicUsize::new(0);
            let waiters = async {
                let one = async {
                    take_and_release(&waiting, first, &name, &inside).await;
                    served.fetch_add(1, Ordering::SeqCst);
                };
                let two = async {
                    take_and_release(&waiting, second, &name, &inside).await;
                    served.fetch_add(1, Ordering::SeqCst);
                };
                tokio::join!(one, two);
            };
            let release = async {
                // Both actors listen on the channel before the hold goes (an election is a
                // fenced lock: one actor serves both).
                let actors = match (first, second) {
                    (Kind::Fenced, Kind::Election) => 1,
                    _ => 2,
                };
                monitor.wait_subscribes(&channel, actors).await;
                let released = Instant::now();
                held.release().await.unwrap();
                released
            };
            let (_, released) = tokio::join!(waiters, release);
            let took = released.elapsed();
            assert_eq!(served.load(Ordering::SeqCst), 2);
            assert!(
                took < WOKEN_WITHIN,
                "{first:?} and {second:?} on one name: served {took:?} after the release (a deaf \
                 waiter retries only at the holder's TTL)"
            );
        }
    }
    waiting.shutdown().await;
    holding.shutdown().await;
}

#[tokio::test]
async fn a_semaphore_and_a_permit_semaphore_on_one_name_are_both_woken_by_messages() {
    let server = RedisServer::start();
    let monitor = Monitor::start(&server);
    let waiting = LockManager::start(Config::new(server.url())).await.unwrap();
    let holding = LockManager::start(Config::new(server.url())).await.unwrap();
    let name = "shared-permits";
    let channel = format!("redisson_sc:{{{name}}}");
    let sem = holding.semaphore(name);
    assert!(sem.try_set_permits(1).await.unwrap());
    let held = sem.acquire(1).await.unwrap();
    let inside = AtomicBool::new(false);
    let plain = async {
        let permit = waiting.semaphore(name).acquire(1).await.unwrap();
        assert!(
            !inside.swap(true, Ordering::SeqCst),
            "two holders of one permit"
        );
        inside.store(false, Ordering::SeqCst);
        permit.release().await.unwrap();
    };
    let expiring = async {
        let permit = waiting.permit_semaphore(name).acquire(1).await.unwrap();
        assert!(
            !inside.swap(true, Ordering::SeqCst),
            "two holders of one permit"
        );
        inside.store(false, Ordering::SeqCst);
        permit.release().await.unwrap();
    };
    let release = async {
        monitor.wait_subscribes(&channel, 2).await;
        let released = Instant::now();
        held.release().await.unwrap();
        released
    };
    // A plain semaphore's permits never expire: a deaf waiter would wait for good.
    let all = async { tokio::join!(plain, expiring, release) };
    let (_, _, released) = tokio::time::timeout(WOKEN_WITHIN * 2, all)
        .await
        .expect("a waiter was never woken");
    let took = released.elapsed();
    assert!(
        took < WOKEN_WITHIN,
        "both served {took:?} after the release"
    );
    waiting.shutdown().await;
    holding.shutdown().await;
}
