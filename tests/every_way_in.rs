//! Mutual exclusion counted on every way in: for each exclusive kind, and for a MultiLock, tasks
//! of two managers take one name again and again, each round in another way — `acquire`,
//! `try_acquire` until it succeeds, `try_acquire_for`, with a lease and without, a hold nested in
//! another of the other mode (the inner one released or dropped before the critical section), an
//! `acquire` cancelled before it is asked again, a guard dropped instead of released — and two
//! tasks share each handle (clones of one holder, used at once).
//!
//! Clones of one holder may be inside together (the lock is reentrant); two holders never, but
//! for readers of a read-write lock, who share it with each other and never with a writer (its
//! run mixes two reading and two writing holders). The critical section is recorded by a script
//! on the same server: it counts every entry in which a holder it excludes was inside, and every
//! entry. Both counts must be exact: no overlap, and as many entries as rounds.

mod support;

use std::time::Duration;

use lockman::{Config, Lock, LockGuard, LockManager, MultiLock};
use redis::AsyncCommands;
use support::RedisServer;

const ROUNDS: u32 = 24;
const LEASE: Duration = Duration::from_secs(20);

/// Enter (ARGV: holder, `x` exclusive or `r` shared): this holder's count inside goes up; an
/// exclusive holder beside any other holder, or a shared one beside another exclusive holder, is
/// an overlap. KEYS: who is inside, entries, overlaps, the exclusive holders inside.
const ENTER: &str = r"
redis.call('hincrby', KEYS[1], ARGV[1], 1)
redis.call('incr', KEYS[2])
if ARGV[2] == 'x' then redis.call('hincrby', KEYS[4], ARGV[1], 1) end
local clash = ARGV[2] == 'x' and redis.call('hlen', KEYS[1]) > 1
for _, h in ipairs(redis.call('hkeys', KEYS[4])) do
    if h ~= ARGV[1] then clash = true end
end
if clash then redis.call('incr', KEYS[3]); return 1 end
return 0";
/// Leave: this holder's counts inside go down.
const LEAVE: &str = r"
for _, key in ipairs(KEYS) do
    if redis.call('hincrby', key, ARGV[1], -1) <= 0 then redis.call('hdel', key, ARGV[1]) end
end
return 0";

/// What a round holds: one guard, or a MultiLock's.
enum Held {
    One(LockGuard),
    Many(lockman::CompositeGuard),
}

impl Held {
    fn is_lost(&self) -> bool {
        match self {
            Held::One(g) => g.is_lost(),
            Held::Many(g) => g.is_lost(),
        }
    }

    async fn release(self) {
        match self {
            Held::One(g) => g.release().await.expect("release"),
            Held::Many(g) => g.release().await.expect("release"),
        }
    }
}

/// A small seeded generator: each task's ways follow from its index.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// One round's hold on a single lock, taken in the way `way` says.
async fn take(lock: &Lock, way: u64) -> LockGuard {
    let wait = Duration::from_secs(30);
    match way {
        0 => lock.acquire().await.expect("acquire"),
        1 => loop {
            if let Some(g) = lock.try_acquire().await.expect("try_acquire") {
                break g;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        },
        2 => lock
            .try_acquire_for(wait)
            .await
            .expect("try_acquire_for")
            .expect("granted within the wait"),
        3 => lock.acquire_with_lease(LEASE).await.expect("lease"),
        4 => lock
            .try_acquire_with_lease(wait, LEASE)
            .await
            .expect("try_acquire_with_lease")
            .expect("granted within the wait"),
        5 | 6 => {
            // Nested: the other mode inside, released (5) or dropped (6) before the critical
            // section, which then runs on the outer hold alone.
            let outer = lock.acquire().await.expect("outer");
            let inner = lock.acquire_with_lease(LEASE).await.expect("inner");
            if way == 5 {
                inner.release().await.expect("inner release");
            } else {
                drop(inner);
            }
            outer
        }
        7 => {
            let outer = lock.acquire_with_lease(LEASE).await.expect("outer lease");
            let inner = lock.acquire().await.expect("inner watchdog");
            inner.release().await.expect("inner release");
            outer
        }
        _ => {
            // Cancelled: an acquire dropped a moment later, then asked again.
            let _ = tokio::time::timeout(Duration::from_millis(1), lock.acquire()).await;
            lock.acquire().await.expect("acquire after a cancelled one")
        }
    }
}

/// Rounds of one task on `locks` (one lock, or a MultiLock's members) as holder `holder`,
/// which holds them exclusively or, for a reader, shared.
async fn rounds(
    (locks, shared): (Vec<Lock>, bool),
    holder: String,
    mut conn: redis::aio::MultiplexedConnection,
    seed: u64,
) {
    let (enter, leave) = (redis::Script::new(ENTER), redis::Script::new(LEAVE));
    let mut rng = Rng(seed);
    for _ in 0..ROUNDS {
        let way = rng.below(9);
        let held = if locks.len() == 1 {
            Held::One(take(&locks[0], way).await)
        } else {
            let multi = MultiLock::new(locks.clone());
            Held::Many(match way % 3 {
                0 => multi.acquire().await.expect("multi acquire"),
                1 => multi.acquire_with_lease(LEASE).await.expect("multi lease"),
                _ => multi
                    .try_acquire_for(Duration::from_secs(30))
                    .await
                    .expect("multi try")
                    .expect("granted within the wait"),
            })
        };
        let _: i64 = enter
            .key("inside")
            .key("entries")
            .key("overlaps")
            .key("inside:x")
            .arg(&holder)
            .arg(if shared { "r" } else { "x" })
            .invoke_async(&mut conn)
            .await
            .expect("enter");
        tokio::time::sleep(Duration::from_micros(rng.below(2_000))).await;
        let inside: &[&str] = if shared {
            &["inside"]
        } else {
            &["inside", "inside:x"]
        };
        let _: i64 = leave
            .key(inside)
            .arg(&holder)
            .invoke_async(&mut conn)
            .await
            .expect("leave");
        assert!(!held.is_lost(), "a hold was lost with no fault");
        if rng.below(4) == 0 {
            drop(held);
        } else {
            held.release().await;
        }
    }
}

/// The handles holder `h` of a manager uses on a name, and whether it shares the lock (a
/// reader).
type Handles = fn(&LockManager, &str, usize) -> (Vec<Lock>, bool);

/// Two managers, two holders each, two tasks per holder (clones of its handle) on `name`.
async fn run(server: &RedisServer, handle: Handles, names: &[&str]) {
    let managers = [
        LockManager::start(Config::new(server.url())).await.unwrap(),
        LockManager::start(Config::new(server.url())).await.unwrap(),
    ];
    let mut conn = server.async_conn().await;
    let _: () = redis::cmd("FLUSHDB").query_async(&mut conn).await.unwrap();
    let mut tasks = Vec::new();
    let mut seed = 1u64;
    for (m, manager) in managers.iter().enumerate() {
        for h in 0..2 {
            let mut shared = false;
            let mut locks: Vec<Lock> = Vec::new();
            for name in names {
                let (mine, reads) = handle(manager, name, h);
                locks.extend(mine);
                shared |= reads;
            }
            let holder = format!("m{m}h{h}");
            for _ in 0..2 {
                seed += 1;
                let (locks, holder, conn) = (locks.clone(), holder.clone(), conn.clone());
                tasks.push(tokio::spawn(rounds((locks, shared), holder, conn, seed)));
            }
        }
    }
    let n = tasks.len() as u32;
    for t in tasks {
        t.await.expect("a task failed");
    }
    let entries: u32 = conn.get("entries").await.unwrap();
    let overlaps: Option<u32> = conn.get("overlaps").await.unwrap();
    assert_eq!(entries, n * ROUNDS, "every round entered once");
    assert_eq!(overlaps, None, "two holders were inside at once");
    // Dropped guards release in the background: everything is free soon after.
    for name in names {
        let free = support::wait::eventually(Duration::from_secs(3), || {
            let mut c = server.conn();
            !redis::cmd("EXISTS")
                .arg(*name)
                .query::<bool>(&mut c)
                .unwrap_or(true)
        })
        .await;
        assert!(free, "{name} left held");
    }
    for m in managers {
        m.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_in_excludes_other_holders_for_every_exclusive_kind() {
    let server = RedisServer::start();
    run(&server, |m, n, _| (vec![m.lock(n)], false), &["ways:lock"]).await;
    run(
        &server,
        |m, n, _| (vec![(*m.fair_lock(n)).clone()], false),
        &["ways:fair"],
    )
    .await;
    run(
        &server,
        |m, n, _| (vec![(*m.fenced_lock(n)).clone()], false),
        &["ways:fenced"],
    )
    .await;
    run(
        &server,
        |m, n, _| (vec![(*m.read_write_lock(n).write()).clone()], false),
        &["ways:rw"],
    )
    .await;
    run(
        &server,
        |m, n, _| (vec![m.lock(n)], false),
        &["ways:m1", "ways:m2"],
    )
    .await;
    run(
        &server,
        |m, n, _| (vec![m.spin_lock(n)], false),
        &["ways:spin"],
    )
    .await;
    // Group locks over member sets that all share `b`: every holder excludes every other.
    run(
        &server,
        |m, n, h| {
            let members = if h == 0 { ["a", "b"] } else { ["b", "c"] };
            (vec![(*m.group_lock(n, members).unwrap()).clone()], false)
        },
        &["ways:group"],
    )
    .await;
}

/// Readers and writers of one read-write lock, every way in: readers share it, a writer is alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_in_keeps_writers_alone_and_lets_readers_share() {
    let server = RedisServer::start();
    run(
        &server,
        |m, n, h| {
            let rw = m.read_write_lock(n);
            match h {
                0 => (vec![(*rw.write()).clone()], false),
                _ => (vec![(*rw.read()).clone()], true),
            }
        },
        &["ways:rw:mixed"],
    )
    .await;
}

/// Two clones of one fair-lock handle wait at once behind another holder: when it releases, the
/// first clone takes the lock by its turn and the second at once as a re-entry of the same
/// holder. Each time, a third party releases within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_of_a_fair_waiter_are_both_granted() {
    let server = RedisServer::start();
    let a = LockManager::start(Config::new(server.url())).await.unwrap();
    let b = LockManager::start(Config::new(server.url())).await.unwrap();
    for round in 0..10 {
        let held = a.fair_lock("fair:clones").acquire().await.unwrap();
        let lock = b.fair_lock("fair:clones");
        let clone = (*lock).clone();
        let wait = Duration::from_secs(5);
        let releaser = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            held.release().await.unwrap();
        });
        let started = std::time::Instant::now();
        let (x, y) = tokio::join!(lock.try_acquire_for(wait), clone.try_acquire_for(wait));
        releaser.await.unwrap();
        let (x, y) = (x.unwrap(), y.unwrap());
        assert!(
            x.is_some() && y.is_some(),
            "round {round}: both granted ({:?}, {:?}) after {:?}",
            x.is_some(),
            y.is_some(),
            started.elapsed()
        );
        x.unwrap().release().await.unwrap();
        y.unwrap().release().await.unwrap();
    }
}
