//! Local hand-off: a release that frees the lock for a waiter of the same manager grants it to
//! that waiter in the same script, with no publish; the wire stays what Redisson expects, and a
//! bounded streak lets other processes in.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lockman::{Config, LockManager};
use redis::Commands;
use support::{RedisServer, wait, wait::woken};

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url()))
        .await
        .expect("manager starts")
}

/// A raw subscriber on the lock's channel.
fn subscriber(server: &RedisServer, name: &str) -> redis::Connection {
    let mut conn = server.conn();
    redis::cmd("SUBSCRIBE")
        .arg(format!("redisson_lock__channel:{{{name}}}"))
        .exec(&mut conn)
        .expect("subscribe");
    conn
}

fn heard(conn: &mut redis::Connection, within: Duration) -> Option<Vec<String>> {
    conn.set_read_timeout(Some(within)).expect("read timeout");
    conn.recv_response()
        .ok()
        .map(|v| redis::from_redis_value(v).expect("a pub/sub message"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_a_local_waiter_without_a_publish() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mut sub = subscriber(&server, "h");
    let mgr = manager(&server).await;
    let (a, b) = (mgr.lock("h"), mgr.lock("h"));
    let held = a.acquire().await.unwrap();
    support::commands::reset_stats(&mut raw);
    let waiting = tokio::spawn({
        let b = b.clone();
        async move { b.acquire().await }
    });
    // b has tried (its first attempt, and the one once its subscription took effect) and is
    // parked: the release's counts below are the release's alone.
    wait::calls_reach(&mut raw, "evalsha", 2).await;
    wait::quiet(&mut raw).await;
    held.release().await.unwrap();
    let got = woken(waiting, Duration::from_secs(1)).await;
    // The hash is the one Redisson expects: only the new holder, count 1, the watchdog lease.
    let fields: Vec<(String, String)> = raw.hgetall("h").unwrap();
    assert_eq!(fields, vec![(b.holder_id(), "1".to_string())]);
    let pttl: i64 = raw.pttl("h").unwrap();
    assert!((29_000..=30_000).contains(&pttl), "{pttl}");
    // One script, no message: the lock was never free.
    assert_eq!(support::commands::command_calls(&mut raw, "evalsha"), 1);
    assert_eq!(support::commands::command_calls(&mut raw, "publish"), 0);
    // The last release, with nobody waiting here, publishes as usual: the first message the
    // subscriber hears.
    got.release().await.unwrap();
    let message = heard(&mut sub, Duration::from_secs(2)).expect("an unlock message");
    assert_eq!(message[1], "redisson_lock__channel:{h}");
    assert_eq!(message[2], "0");
    let exists: bool = raw.exists("h").unwrap();
    assert!(!exists);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_tokens_grow_across_hand_offs() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let lock = mgr.fenced_lock("f");
        tasks.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for _ in 0..25 {
                let g = lock.acquire().await.unwrap();
                tokens.push(g.token());
                tokio::task::yield_now().await;
                g.release().await.unwrap();
            }
            tokens
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_unstable();
    let before = all.len();
    all.dedup();
    assert_eq!(all.len(), before, "a token was handed out twice");
    assert_eq!(all.len(), 100);
    let mut raw = server.conn();
    let counter: u64 = raw.get("redisson_lock_token:{f}").unwrap();
    assert_eq!(
        all[99], counter,
        "the counter is the last token, hand-offs included"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_gets_its_turn_while_local_tasks_hand_off() {
    another_process_gets_its_turn(false).await;
}

/// The same with the non-reentrant lock, which hands off as the reentrant one does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_gets_its_turn_while_local_non_reentrant_tasks_hand_off() {
    another_process_gets_its_turn(true).await;
}

async fn another_process_gets_its_turn(non_reentrant: bool) {
    let server = RedisServer::start();
    let (busy, other) = (manager(&server).await, manager(&server).await);
    let lock = |mgr: &LockManager| {
        if non_reentrant {
            mgr.non_reentrant_lock("t")
        } else {
            mgr.lock("t")
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let conn = server.async_conn().await;
    let mut tasks = Vec::new();
    // Four local tasks keep the lock busy: hand-off after hand-off.
    for _ in 0..4 {
        let (lock, stop, conn) = (lock(&busy), stop.clone(), conn.clone());
        tasks.push(tokio::spawn(async move {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                support::locks::count_rounds(lock.clone(), conn.clone(), "t:count", 1).await;
                rounds += 1;
            }
            rounds
        }));
    }
    // The local tasks are busy: several streaks of hand-offs have run.
    let mut raw = server.conn();
    wait::until("the local tasks took 50 turns", || {
        raw.get::<_, Option<u64>>("t:count").unwrap().unwrap_or(0) >= 50
    })
    .await;
    // A waiter in another manager (another process, as far as Redis can tell) is woken when a
    // streak ends, not only when the 30 s lease would run out.
    let started = Instant::now();
    for _ in 0..3 {
        support::locks::count_rounds(lock(&other), conn.clone(), "t:count", 1).await;
    }
    let waited = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut rounds = 3;
    for t in tasks {
        rounds += t.await.unwrap();
    }
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    // Exclusion held throughout: every round counted (a lost update would leave it short).
    let count: u64 = raw.get("t:count").unwrap();
    assert_eq!(count, rounds);
    assert!(rounds > 50, "the local tasks were busy: {rounds}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_re_enters_while_another_waits_and_its_last_release_hands_off() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let (a, b) = (mgr.lock("r"), mgr.lock("r"));
    let first = a.acquire().await.unwrap();
    support::commands::reset_stats(&mut raw);
    let waiting = tokio::spawn({
        let b = b.clone();
        async move { b.acquire().await }
    });
    // b's two attempts found the lock taken: it waits.
    wait::calls_reach(&mut raw, "evalsha", 2).await;
    // Another holder waits, but a's holder re-enters at once.
    let second = a.acquire().await.unwrap();
    let count: String = raw.hget("r", a.holder_id()).unwrap();
    assert_eq!(count, "2");
    first.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "still held once");
    second.release().await.unwrap();
    let got = woken(waiting, Duration::from_secs(1)).await;
    let fields: Vec<(String, String)> = raw.hgetall("r").unwrap();
    assert_eq!(fields, vec![(b.holder_id(), "1".to_string())]);
    got.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_of_one_holder_re_enter_concurrently_and_leave_nothing() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let lock = mgr.lock("clones");
    let max = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (lock, max) = (lock.clone(), max.clone());
            tokio::spawn(async move {
                for _ in 0..50 {
                    let outer = lock.acquire().await.unwrap();
                    let inner = lock.acquire().await.unwrap();
                    let count: u64 = lock.hold_count().await.unwrap().into();
                    max.fetch_max(count, Ordering::Relaxed);
                    inner.release().await.unwrap();
                    outer.release().await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    // Up to two holds per task at once, all counted in Redis, and every one released.
    let max = max.load(Ordering::Relaxed);
    assert!((2..=16).contains(&max), "{max}");
    let exists: bool = raw.exists("clones").unwrap();
    assert!(!exists, "a count was left behind");
}

/// The non-reentrant lock: a release hands the lock to a local waiter in one script with no
/// publish, as the reentrant lock's does; the holder's own clone, asking while that waiter waits,
/// is refused at once rather than queued behind it, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_reentrant_release_hands_off_and_the_holders_clone_is_refused_meanwhile() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let (a, b) = (mgr.non_reentrant_lock("n"), mgr.non_reentrant_lock("n"));
    let held = a.acquire().await.unwrap();
    support::commands::reset_stats(&mut raw);
    let waiting = tokio::spawn({
        let b = b.clone();
        async move { b.acquire().await }
    });
    let mut probe = server.conn();
    assert!(
        support::wait::subscribed(
            &mut probe,
            "redisson_lock__channel:{n}",
            Duration::from_secs(5)
        )
        .await
    );
    // b has tried twice (its first attempt, and the one once its subscription took effect,
    // which can come well after the subscription shows in Redis) and is parked: the release's
    // counts below are the release's alone.
    wait::calls_reach(&mut raw, "evalsha", 2).await;
    wait::quiet(&mut raw).await;
    let started = Instant::now();
    let again = tokio::time::timeout(Duration::from_secs(5), a.clone().acquire())
        .await
        .expect("answered, not queued behind the waiter");
    assert!(
        matches!(again, Err(lockman::LockError::AlreadyHeld { .. })),
        "{again:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let fields: Vec<(String, String)> = raw.hgetall("n").unwrap();
    assert_eq!(fields, vec![(a.holder_id(), "1".to_string())]);
    assert!(!waiting.is_finished(), "b still waits");
    support::commands::reset_stats(&mut raw);
    held.release().await.unwrap();
    let got = woken(waiting, Duration::from_secs(1)).await;
    let fields: Vec<(String, String)> = raw.hgetall("n").unwrap();
    assert_eq!(fields, vec![(b.holder_id(), "1".to_string())]);
    // One script, no message: the lock was never free.
    assert_eq!(support::commands::command_calls(&mut raw, "evalsha"), 1);
    assert_eq!(support::commands::command_calls(&mut raw, "publish"), 0);
    got.release().await.unwrap();
    let exists: bool = raw.exists("n").unwrap();
    assert!(!exists);
}

fn numsub(raw: &mut redis::Connection, channel: &str) -> u64 {
    let (_, n): (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(raw)
        .unwrap();
    n
}

/// Script calls on key `key` the server has run so far, as `MONITOR` shows them (gathered by a
/// thread).
struct Scripts(Arc<std::sync::Mutex<Vec<String>>>);

impl Scripts {
    fn watch(server: &RedisServer) -> Self {
        Self(support::commands::monitor(server))
    }

    /// Returns once every command the server ran before now is in the lines: MONITOR shows
    /// them in the order they ran, and its thread may lag behind.
    async fn caught_up(&self, raw: &mut redis::Connection) {
        let marker = format!("caught-up-{}", uuid::Uuid::new_v4());
        redis::cmd("ECHO").arg(&marker).exec(raw).unwrap();
        let seen = || self.0.lock().unwrap().iter().any(|l| l.contains(&marker));
        wait::until("MONITOR caught up", seen).await;
    }

    /// How many lines so far ran `command` (`"evalsha"`, `"subscribe"`) naming `arg` and
    /// containing `also` (a holder's client id, say).
    fn count(&self, command: &str, arg: &str, also: &str) -> usize {
        let (command, arg) = (format!("\"{command}\""), format!("\"{arg}\""));
        let lines = self.0.lock().unwrap();
        lines
            .iter()
            .filter(|l| l.to_ascii_lowercase().contains(&command) && l.contains(&arg))
            .filter(|l| l.contains(also))
            .count()
    }
}

/// A manager whose waiter got the lock keeps the lock's channel subscribed while its actor
/// lingers: the name's next wait sends no SUBSCRIBE and no attempt after one, and is still woken
/// by the release's message (not by the 30 s lease); once the actor has lingered and departed,
/// the channel is unsubscribed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_names_next_wait_subscribes_nothing_and_the_channel_leaves_with_the_actor() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let scripts = Scripts::watch(&server);
    let channel = "redisson_lock__channel:{hot}";
    let other = manager(&server).await;
    let linger = Duration::from_millis(500);
    let config = Config::new(server.url()).idle_linger(linger);
    let waiter = LockManager::start(config).await.unwrap();
    let id = waiter.client_id().to_string();
    // Round 0 subscribes (its attempt, the SUBSCRIBE, the attempt after it); round 1 finds the
    // channel kept (its attempt, no SUBSCRIBE).
    for (round, (subscribes, attempts)) in [(1, 2), (0, 1)].into_iter().enumerate() {
        let held = other.lock("hot").acquire().await.unwrap();
        // The waiter's attempts: its holder is its manager's client id, a colon, its task.
        let attempted = || scripts.count("evalsha", "hot", &id);
        let subscribed = || scripts.count("subscribe", channel, "");
        scripts.caught_up(&mut raw).await;
        let (s0, e0) = (subscribed(), attempted());
        let lock = waiter.lock("hot");
        let task = tokio::spawn(async move { lock.acquire().await });
        wait::until("the waiter's attempts", || attempted() >= e0 + attempts).await;
        // Parked: nothing more comes before the release.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!task.is_finished(), "round {round}: the waiter must wait");
        scripts.caught_up(&mut raw).await;
        // Round 1's may be two: the kept channel also carries round 0's own release message,
        // which wakes the waiter once more if it comes after its attempt (the thread late).
        let made = attempted() - e0;
        assert!(
            made == attempts || (round == 1 && made == 2),
            "round {round}: {made}"
        );
        assert_eq!(subscribed(), s0 + subscribes, "round {round}");
        let freed = Instant::now();
        held.release().await.unwrap();
        let guard = woken(task, Duration::from_secs(10)).await;
        assert!(
            freed.elapsed() < Duration::from_secs(5),
            "round {round}: woken by the message, not the lease: {:?}",
            freed.elapsed()
        );
        guard.release().await.unwrap();
        // Kept while the actor lingers (its linger, 500 ms, begins at this release).
        assert_eq!(numsub(&mut raw, channel), 1, "round {round}: kept");
    }
    // The actor departs after its linger: the channel goes with it.
    wait::until("the kept channel unsubscribed", || {
        numsub(&mut raw, channel) == 0
    })
    .await;
    other.shutdown().await;
    waiter.shutdown().await;
}
