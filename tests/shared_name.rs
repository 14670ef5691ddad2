//! One name through several kinds in one manager: each kind has an actor of its own (and its
//! own local hand-off), so a mistake in how actors of one name share holders, counts, hand-offs
//! or a channel shows here.
//!
//! Exclusion (docs/protocol.md, "Non-reentrant locks"): an `RLock`, an `RFairLock` and their
//! non-reentrant kinds on one name "exclude each other and wake each other"; a fenced lock is
//! "everything of the reentrant lock" plus its counter; and "One name, one kind": the
//! read-write lock refuses a hash without `mode` (and the others a hash with one) with
//! `WrongType`, writing nothing.
//!
//! Waking: the kinds that share a name's channel (the reentrant, fenced and non-reentrant locks
//! and the election of one name on `redisson_lock__channel:{name}`; the semaphore and the
//! permit semaphore on `redisson_sc:{name}`) must all hear its messages. Every pair of them
//! waits in one manager behind another manager's hold; once it is released, both are served one
//! after the other, each woken by the release before it, long before the retry at the holder's
//! TTL (30 s) that a deaf waiter falls back on.
mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockman::{Config, Lock, LockError, LockManager};
use redis::{AsyncCommands, Commands};
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
        Self(support::commands::monitor(server))
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

// Exclusion: every exclusive kind against every other, and the read-write lock refused.

const WATCHDOG: Duration = Duration::from_millis(2000);

/// The exclusive kinds that share one hash layout (the write side of a read-write lock has a
/// `mode` field the others refuse as another kind: `WRONGTYPE`, tested apart).
fn exclusive_kinds(mgr: &LockManager, name: &str) -> Vec<(&'static str, Lock)> {
    support::locks::exclusive_kinds(mgr, name)
        .into_iter()
        .filter(|(kind, _)| *kind != "write")
        .collect()
}

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url()).watchdog_timeout(WATCHDOG))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_held_shuts_out_every_other_kind_of_the_same_manager() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    for (holding, lock) in exclusive_kinds(&mgr, "shared") {
        let guard = lock.acquire().await.unwrap();
        for (other, candidate) in exclusive_kinds(&mgr, "shared") {
            let got = candidate.try_acquire().await.unwrap();
            assert!(
                got.is_none(),
                "{other} got in while {holding} held the same name"
            );
        }
        let rw = mgr.read_write_lock("shared");
        for (side, attempt) in [
            ("read", rw.read().try_acquire().await.map(|g| g.is_some())),
            ("write", rw.write().try_acquire().await.map(|g| g.is_some())),
        ] {
            assert!(
                matches!(attempt, Err(LockError::WrongType { .. })),
                "{side} while {holding} held: {attempt:?}"
            );
        }
        let fields: std::collections::HashMap<String, String> = raw.hgetall("shared").unwrap();
        assert_eq!(
            fields,
            std::collections::HashMap::from([(lock.holder_id(), "1".to_owned())]),
            "while {holding} held"
        );
        guard.release().await.unwrap();
        assert!(!raw.exists::<_, bool>("shared").unwrap(), "{holding}");
    }
    mgr.shutdown().await;
}

/// Two tasks per kind, all in one manager on one name, each taking the lock 15 times with a
/// bounded wait and incrementing a counter in Redis non-atomically (GET, yield, SET) inside:
/// the counter is exact only if no two holds of any kinds ever overlapped. Fenced tokens keep
/// growing across the other kinds' holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_of_every_kind_on_one_name_never_overlap() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let conn = server.async_conn().await;
    let mut tasks = Vec::new();
    for round in 0..2 {
        for (kind, lock) in exclusive_kinds(&mgr, "mixed") {
            let mut conn = conn.clone();
            tasks.push(tokio::spawn(async move {
                let mut taken = 0u64;
                let mut last_token = 0u64;
                let deadline = Instant::now() + Duration::from_secs(60);
                while taken < 15 {
                    assert!(Instant::now() < deadline, "{kind} #{round}: starved");
                    let Some(g) = lock
                        .try_acquire_for(Duration::from_millis(300))
                        .await
                        .unwrap()
                    else {
                        continue;
                    };
                    if let Some(token) = g.token() {
                        assert!(
                            token > last_token,
                            "{kind}: token {token} after {last_token}"
                        );
                        last_token = token;
                    }
                    let n: u64 = conn
                        .get::<_, Option<u64>>("mixed:counter")
                        .await
                        .unwrap()
                        .unwrap_or(0);
                    tokio::task::yield_now().await;
                    let _: () = conn.set("mixed:counter", n + 1).await.unwrap();
                    g.release().await.unwrap();
                    taken += 1;
                }
                taken
            }));
        }
    }
    let mut taken = 0;
    for t in tasks {
        taken += t.await.unwrap();
    }
    let total: u64 = conn.clone().get("mixed:counter").await.unwrap();
    assert_eq!(total, taken, "holds overlapped");
    // Two tasks of every kind, 15 holds each.
    assert_eq!(taken, 2 * 15 * exclusive_kinds(&mgr, "mixed").len() as u64);
    let mut raw = server.conn();
    assert!(!raw.exists::<_, bool>("mixed").unwrap());
    let queue: i64 = raw.llen("redisson_lock_queue:{mixed}").unwrap();
    assert_eq!(queue, 0, "fair places left behind");
    mgr.shutdown().await;
}

/// What Redis holds (client records aside) while `lock` of `kind` is held once by its holder
/// `h` on the name `k`: the name's hash (its fields as the kind writes them), a read hold's
/// timeout key, and the fenced lock's token counter once a fenced hold was taken.
fn held_state(
    kind: &str,
    h: &str,
    fenced_before: bool,
) -> (
    std::collections::HashMap<String, String>,
    std::collections::BTreeSet<String>,
) {
    use std::collections::{BTreeSet, HashMap};
    let mut keys = BTreeSet::from(["k".to_owned()]);
    if fenced_before || kind == "fenced" {
        keys.insert("redisson_lock_token:{k}".to_owned());
    }
    let fields = match kind {
        "read" => {
            keys.insert(format!("{{k}}:{h}:rwlock_timeout:1"));
            HashMap::from([("mode".into(), "read".into()), (h.to_owned(), "1".into())])
        }
        "write" => HashMap::from([
            ("mode".into(), "write".into()),
            (format!("{h}:write"), "1".into()),
        ]),
        _ => HashMap::from([(h.to_owned(), "1".into())]),
    };
    (fields, keys)
}

/// Kept handles of seven kinds on one name, used in turn, with the name's actors (one per kind)
/// lingering 100 ms when idle: some acquires reach the actor a handle's last grant came from,
/// some find it stopped (every actor waited out), some come while other kinds' actors linger.
/// Each acquire must reach its own kind's actor: Redis holds exactly that kind's fields and
/// keys, every other kind is shut out (the exclusive kinds find it taken, the read-write sides
/// and the others refuse each other's hash with `WrongType`), and the release leaves nothing
/// but the fenced counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_handles_of_several_kinds_on_one_name_reach_their_own_actors() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let config = Config::new(server.url()).idle_linger(Duration::from_millis(100));
    let mgr = LockManager::start(config).await.unwrap();
    // The two sides of two read-write holders: one holder's would share (a downgrade).
    let mut handles = exclusive_kinds(&mgr, "k");
    handles.push(("read", mgr.read_write_lock("k").read().into()));
    handles.push(("write", mgr.read_write_lock("k").write().into()));
    let mut fenced = false;
    let mut last_token = 0;
    for round in 0..4usize {
        for step in 0..handles.len() {
            // Each round in another order (a stride coprime with 8 kinds).
            let (kind, lock) = &handles[(step * (2 * round + 1) + round) % handles.len()];
            match round {
                // Every actor stopped: the kept address is dead.
                1 => assert!(support::wait::lock_actors_stop(&mgr, Duration::from_secs(5)).await),
                // Some stopped, some lingering.
                3 if step % 2 == 0 => tokio::time::sleep(Duration::from_millis(150)).await,
                _ => {}
            }
            let guard = lock.acquire().await.unwrap();
            if let Some(token) = guard.token() {
                assert!(
                    token > last_token,
                    "{kind}: token {token} after {last_token}"
                );
                last_token = token;
            }
            fenced |= *kind == "fenced";
            let (fields, keys) = held_state(kind, &lock.holder_id(), fenced);
            let actual: std::collections::HashMap<String, String> = raw.hgetall("k").unwrap();
            assert_eq!(actual, fields, "round {round}: {kind} held");
            assert_eq!(
                support::commands::keys_but_records(&mut raw),
                keys,
                "round {round}: {kind} held"
            );
            for (other, candidate) in &handles {
                let got = candidate.try_acquire().await;
                let rw_pair = ["read", "write"];
                let one_rw = rw_pair.contains(kind) != rw_pair.contains(other);
                if other == kind {
                    continue;
                } else if one_rw {
                    assert!(
                        matches!(got, Err(LockError::WrongType { .. })),
                        "round {round}: {other} while {kind} held: {got:?}"
                    );
                } else {
                    assert!(
                        matches!(got, Ok(None)),
                        "round {round}: {other} while {kind} held: {got:?}"
                    );
                }
            }
            guard.release().await.unwrap();
            let mut left = std::collections::BTreeSet::new();
            if fenced {
                left.insert("redisson_lock_token:{k}".to_owned());
            }
            assert_eq!(
                support::commands::keys_but_records(&mut raw),
                left,
                "round {round}: after {kind}"
            );
        }
    }
    mgr.shutdown().await;
}
