//! The bad-input matrix: one table, each row a bad (or awkward) input, what lockman does with it
//! and why. Every row runs against a fresh redis-server of its own, bounded in time (a hang
//! fails the row), in a task of its own (a panic fails the row), and every refused call must
//! leave that server exactly as it was (a digest of every lock key, before and after).
//!
//! Releasing one guard twice is not a row: `release` takes the guard by value, so the second
//! call does not compile (a `compile_fail` example on `LockGuard::release` shows it).

mod support;

use std::future::Future;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::pin::Pin;
use std::time::{Duration, Instant};

use lockman::actix::{Acquire, Release, Wait};
use lockman::{Config, LockError, LockKind, LockManager, MultiLock, RedLock};
use redis::Commands;
use support::{Options, RedisServer, closed_port};

/// What a row must come to.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Outcome {
    /// Handled: it works (binary-safe names, absurd but valid durations, recoveries).
    Works,
    Invalid,
    WrongType,
    Connect,
    Auth,
    NotHeld,
    Shutdown,
    ReadOnly,
    OutOfMemory,
    /// Redis refused the command with an error of its own, passed on as `LockError::Redis`.
    Redis,
    /// Redis refused for a passing state, retried within the wait, then
    /// `LockError::Unavailable` naming the refusal (the crate docs, "When Redis is away").
    Unavailable,
}

impl Outcome {
    fn of(res: &Result<(), LockError>) -> Option<Self> {
        Some(match res {
            Ok(()) => Self::Works,
            Err(LockError::InvalidArgument { .. }) => Self::Invalid,
            Err(LockError::WrongType { .. }) => Self::WrongType,
            Err(LockError::Connect { .. }) => Self::Connect,
            Err(LockError::Auth { .. }) => Self::Auth,
            Err(LockError::NotHeld { .. }) => Self::NotHeld,
            Err(LockError::Shutdown) => Self::Shutdown,
            Err(LockError::ReadOnly { .. }) => Self::ReadOnly,
            Err(LockError::OutOfMemory { .. }) => Self::OutOfMemory,
            Err(LockError::Redis { .. }) => Self::Redis,
            Err(LockError::Unavailable { .. }) => Self::Unavailable,
            Err(_) => return None,
        })
    }
}

/// The server a row runs against, and any it needs beside it (a replica's primary).
struct Env {
    server: RedisServer,
    _others: Vec<RedisServer>,
}

impl Env {
    fn plain() -> Self {
        Self {
            server: RedisServer::start(),
            _others: Vec::new(),
        }
    }

    fn config(&self) -> Config {
        Config::new(self.server.url())
    }

    async fn manager(&self) -> LockManager {
        LockManager::start(self.config())
            .await
            .expect("manager starts")
    }

    fn raw(&self) -> redis::Connection {
        self.server.conn()
    }
}

type Run = for<'a> fn(&'a Env) -> Pin<Box<dyn Future<Output = Result<(), LockError>> + 'a>>;

struct Row {
    input: &'static str,
    outcome: Outcome,
    why: &'static str,
    setup: fn() -> Env,
    run: Run,
}

macro_rules! row {
    ($input:expr, $outcome:ident, $why:expr, |$env:ident| $body:block) => {
        row!($input, $outcome, $why, Env::plain, |$env| $body)
    };
    ($input:expr, $outcome:ident, $why:expr, $setup:expr, |$env:ident| $body:block) => {
        Row {
            input: $input,
            outcome: Outcome::$outcome,
            why: $why,
            setup: $setup,
            run: |$env| Box::pin(async move $body),
        }
    };
}

const WAIT: Duration = Duration::from_millis(200);

fn table() -> Vec<Row> {
    vec![
        // Names.
        row!("empty name", Invalid, "a lock needs a key", |env| {
            env.manager().await.lock("").acquire().await.map(drop)
        }),
        row!(
            "empty name, every other verb",
            Invalid,
            "checked before anything is sent",
            |env| {
                let mgr = env.manager().await;
                let lock = mgr.lock("");
                all_invalid([
                    lock.try_acquire().await.map(drop),
                    lock.try_acquire_for(WAIT).await.map(drop),
                    lock.force_unlock().await.map(drop),
                    lock.is_locked().await.map(drop),
                    lock.hold_count().await.map(drop),
                    lock.remaining_ttl().await.map(drop),
                    mgr.lock_actor("").await.map(drop),
                    mgr.fair_lock("").try_acquire().await.map(drop),
                    mgr.read_write_lock("")
                        .write()
                        .try_acquire()
                        .await
                        .map(drop),
                    mgr.fenced_lock("").try_acquire().await.map(drop),
                ])
            }
        ),
        row!(
            "a 1 MB name",
            Works,
            "keys are binary-safe, up to 512 MB",
            |env| {
                let name = "n".repeat(1 << 20);
                works_exactly(env, &name).await
            }
        ),
        row!(
            "a name with NUL bytes",
            Works,
            "keys are binary-safe",
            |env| { works_exactly(env, "a\0b\0").await }
        ),
        // A group lock's members (refused when the handle is made: nothing is sent).
        row!(
            "group lock, no members",
            Invalid,
            "nothing to take",
            |env| {
                env.manager()
                    .await
                    .group_lock("g", Vec::<String>::new())
                    .map(drop)
            }
        ),
        row!(
            "group lock, a member twice",
            Invalid,
            "one field cannot be taken twice in one hold",
            |env| { env.manager().await.group_lock("g", ["a", "a"]).map(drop) }
        ),
        row!(
            "group lock, a member with ':'",
            Invalid,
            "the hash's `<member>:<owner>:expire_time` fields are split on ':'",
            |env| { env.manager().await.group_lock("g", ["a:b"]).map(drop) }
        ),
        row!(
            "group lock, an empty member",
            Invalid,
            "a field needs a name",
            |env| { env.manager().await.group_lock("g", [""]).map(drop) }
        ),
        row!(
            "group lock, too many members",
            Invalid,
            "one script writes three fields per member, blocking the server meanwhile",
            |env| {
                let many = (0..=lockman::MAX_GROUP_MEMBERS).map(|i| i.to_string());
                env.manager().await.group_lock("g", many).map(drop)
            }
        ),
        row!(
            "group lock, empty name",
            Invalid,
            "a lock needs a key",
            |env| {
                let mgr = env.manager().await;
                let lock = mgr.group_lock("", ["a"])?;
                all_invalid([
                    lock.acquire().await.map(drop),
                    lock.try_acquire().await.map(drop),
                    lock.force_unlock().await.map(drop),
                    lock.is_locked().await.map(drop),
                ])
            }
        ),
        // Leases and waits.
        row!(
            "zero lease",
            Invalid,
            "a lock that expires at once protects nothing",
            |env| {
                let mgr = env.manager().await;
                mgr.lock("l")
                    .acquire_with_lease(Duration::ZERO)
                    .await
                    .map(drop)
            }
        ),
        row!(
            "lease under 1 ms",
            Invalid,
            "PEXPIRE counts whole milliseconds",
            |env| {
                let mgr = env.manager().await;
                mgr.lock("l")
                    .acquire_with_lease(Duration::from_micros(999))
                    .await
                    .map(drop)
            }
        ),
        row!(
            "lease of Duration::MAX (overflows ms)",
            Invalid,
            "no Redis expiry is that long",
            |env| {
                let mgr = env.manager().await;
                mgr.lock("l")
                    .acquire_with_lease(Duration::MAX)
                    .await
                    .map(drop)
            }
        ),
        row!(
            "lease above 2^53 ms",
            Invalid,
            "beyond what Lua's numbers hold exactly",
            |env| {
                let mgr = env.manager().await;
                let lease = Duration::from_millis((1 << 53) + 1);
                mgr.lock("l")
                    .try_acquire_with_lease(WAIT, lease)
                    .await
                    .map(drop)
            }
        ),
        row!(
            "lease of 10 years",
            Works,
            "absurd but valid: Redis keeps it",
            |env| {
                let mgr = env.manager().await;
                let ten_years = Duration::from_secs(10 * 365 * 24 * 3600);
                let guard = mgr.lock("l").acquire_with_lease(ten_years).await?;
                let pttl: i64 = env.raw().pttl("l").expect("PTTL");
                assert!(pttl > (ten_years.as_millis() as i64) - 60_000, "{pttl}");
                guard.release().await?;
                assert_eq!(dbsize(env), 0);
                Ok(())
            }
        ),
        row!(
            "zero wait on a free lock",
            Works,
            "one attempt, which succeeds",
            |env| {
                let mgr = env.manager().await;
                let guard = mgr.lock("w").try_acquire_for(Duration::ZERO).await?;
                guard.expect("free, so taken").release().await
            }
        ),
        row!(
            "zero wait on a busy lock",
            Works,
            "one attempt, then None at once",
            |env| {
                let mgr = env.manager().await;
                let _held = mgr.lock("w").acquire().await?;
                let started = Instant::now();
                let got = mgr.lock("w").try_acquire_for(Duration::ZERO).await?;
                assert!(got.is_none() && started.elapsed() < Duration::from_secs(1));
                Ok(())
            }
        ),
        row!(
            "wait of Duration::MAX on a busy lock",
            Works,
            "waits as long as it takes (no overflow)",
            |env| {
                let mgr = env.manager().await;
                let held = mgr.lock("w").acquire().await?;
                let waiter = mgr.lock("w");
                let (got, ()) = tokio::join!(waiter.try_acquire_for(Duration::MAX), async {
                    tokio::time::sleep(WAIT).await;
                    held.release().await.expect("release");
                });
                got?.expect("taken once released").release().await
            }
        ),
        // Settings.
        row!(
            "watchdog timeout zero",
            Invalid,
            "renewal every 0 ms",
            |env| { start(env.config().watchdog_timeout(Duration::ZERO)).await }
        ),
        row!(
            "watchdog timeout of Duration::MAX",
            Invalid,
            "no Redis expiry is that long",
            |env| { start(env.config().watchdog_timeout(Duration::MAX)).await }
        ),
        row!(
            "lock delay of Duration::MAX",
            Invalid,
            "no Redis expiry is that long: refused before a grant (it failed each acquire after one)",
            |env| { start(env.config().lock_delay(Duration::MAX)).await }
        ),
        row!(
            "response timeout zero",
            Invalid,
            "every call would time out",
            |env| { start(env.config().response_timeout(Duration::ZERO)).await }
        ),
        row!(
            "connect timeout zero",
            Invalid,
            "no connection could be made",
            |env| { start(env.config().connect_timeout(Duration::ZERO)).await }
        ),
        // Keys that are not locks.
        row!(
            "lock name holding a string",
            WrongType,
            "not a lock: left alone, not waited on",
            with_other_types,
            |env| {
                let mgr = env.manager().await;
                let lock = mgr.lock("text");
                within(Duration::from_secs(2), lock.acquire())
                    .await
                    .map(drop)
            }
        ),
        row!(
            "lock name holding a list (fair lock)",
            WrongType,
            "not a lock",
            with_other_types,
            |env| {
                env.manager()
                    .await
                    .fair_lock("list")
                    .try_acquire()
                    .await
                    .map(drop)
            }
        ),
        row!(
            "lock name holding a set (write lock)",
            WrongType,
            "not a lock",
            with_other_types,
            |env| {
                let mgr = env.manager().await;
                mgr.read_write_lock("set")
                    .write()
                    .try_acquire_for(WAIT)
                    .await
                    .map(drop)
            }
        ),
        // Where Redis is.
        row!("malformed URL", Invalid, "cannot be parsed", |_env| {
            start(Config::new("redis://[::1")).await
        }),
        row!(
            "unknown scheme",
            Invalid,
            "only redis, rediss and redis+unix",
            |_env| { start(Config::new(format!("http://127.0.0.1:{}/", closed_port()))).await }
        ),
        row!("closed port", Connect, "nothing listens there", |_env| {
            start(Config::new(format!(
                "redis://127.0.0.1:{}/0",
                closed_port()
            )))
            .await
        }),
        row!(
            "a server that answers HTTP",
            Connect,
            "it does not speak RESP",
            |_env| {
                let port = http_server();
                start(
                    Config::new(format!("redis://127.0.0.1:{port}/0"))
                        .connect_timeout(Duration::from_secs(2)),
                )
                .await
            }
        ),
        row!(
            "wrong password",
            Auth,
            "the server refuses it",
            with_password,
            |env| {
                start(Config::new(env.server.url().replacen(
                    "://",
                    "://:wrong@",
                    1,
                )))
                .await
            }
        ),
        // Redis in a state it should not be in.
        row!(
            "SCRIPT FLUSH while holding",
            Works,
            "EVALSHA's NOSCRIPT makes lockman load them again",
            |env| {
                let mgr = env.manager().await;
                let guard = mgr.lock("s").acquire().await?;
                let _: () = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query(&mut env.raw())
                    .expect("flush");
                guard.release().await?;
                let _: () = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query(&mut env.raw())
                    .expect("flush");
                mgr.lock("s").acquire().await?.release().await?;
                assert_eq!(dbsize(env), 0);
                Ok(())
            }
        ),
        row!(
            "a read-only replica behind the URL",
            ReadOnly,
            "found when the manager starts: locks need the primary",
            replica,
            |env| { start(env.config()).await }
        ),
        row!(
            "maxmemory reached with noeviction",
            OutOfMemory,
            "Redis refuses the write",
            full,
            |env| {
                let mgr = env.manager().await;
                within(Duration::from_secs(5), mgr.lock("m").acquire())
                    .await
                    .map(drop)
            }
        ),
        // Holds that are no longer held.
        row!(
            "release after the lease ran out",
            NotHeld,
            "the lock expired",
            |env| {
                let mgr = env.manager().await;
                let guard = mgr
                    .lock("e")
                    .acquire_with_lease(Duration::from_millis(30))
                    .await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
                guard.release().await
            }
        ),
        row!(
            "release of a hold someone else now has",
            NotHeld,
            "force-unlocked and taken by another",
            |env| {
                let mgr = env.manager().await;
                let mine = mgr.lock("o").acquire().await?;
                assert!(mgr.lock("o").force_unlock().await?);
                let theirs = mgr.lock("o").acquire().await?;
                let before = digest(env);
                let res = mine.release().await;
                assert_eq!(digest(env), before, "their hold is untouched");
                theirs.release().await?;
                res
            }
        ),
        row!(
            "force unlock of a free lock",
            Works,
            "Ok(false): nothing to do",
            |env| {
                let freed = env.manager().await.lock("f").force_unlock().await?;
                assert!(!freed);
                assert_eq!(dbsize(env), 0);
                Ok(())
            }
        ),
        // Locks of one name, of two kinds, or bent out of shape.
        row!(
            "one name, two kinds at once",
            WrongType,
            "a read-write lock's hash (with `mode`) and the others' (without) refuse each other: \
             joining would let two holders in",
            |env| {
                let (a, b) = (env.manager().await, env.manager().await);
                let held = a.lock("k").acquire().await?;
                let before = digest(env);
                let on_reentrant = [
                    b.read_write_lock("k")
                        .read()
                        .try_acquire_for(WAIT)
                        .await
                        .map(drop),
                    b.read_write_lock("k")
                        .write()
                        .try_acquire_for(WAIT)
                        .await
                        .map(drop),
                    a.read_write_lock("k")
                        .read()
                        .try_acquire_for(WAIT)
                        .await
                        .map(drop),
                ];
                assert_eq!(digest(env), before, "the reentrant hold is untouched");
                held.release().await?;
                let reading = a.read_write_lock("k").read().acquire().await?;
                let before = digest(env);
                let on_read = [
                    b.lock("k").try_acquire_for(WAIT).await.map(drop),
                    b.fair_lock("k").try_acquire_for(WAIT).await.map(drop),
                    b.fenced_lock("k").try_acquire_for(WAIT).await.map(drop),
                    a.lock("k").try_acquire_for(WAIT).await.map(drop),
                ];
                assert_eq!(digest(env), before, "the read hold is untouched");
                reading.release().await?;
                all_wrong_type(on_reentrant.into_iter().chain(on_read))
            }
        ),
        row!(
            "a holder's count that is not an integer",
            Redis,
            "HINCRBY refuses it: Redis's error is passed on and nothing changes",
            |env| {
                let mgr = env.manager().await;
                let lock = mgr.lock("odd");
                let _: () = env.raw().hset("odd", lock.holder_id(), "x").expect("HSET");
                let _: () = env.raw().pexpire("odd", 60_000).expect("PEXPIRE");
                let before = digest(env);
                let res = lock.try_acquire_for(WAIT).await.map(drop);
                assert_eq!(digest(env), before);
                let _: () = env.raw().del("odd").expect("DEL");
                res
            }
        ),
        row!(
            "another holder's field that is not a count",
            Works,
            "a lock held by someone else: waited for, None at the deadline, left as it is",
            with_odd_locks,
            |env| {
                let before = digest(env);
                let got = env
                    .manager()
                    .await
                    .lock("foreign")
                    .try_acquire_for(WAIT)
                    .await?;
                assert!(got.is_none());
                assert_eq!(digest(env), before);
                Ok(())
            }
        ),
        row!(
            "a lock without TTL",
            Works,
            "held until someone deletes it: None at the deadline, left as it is",
            with_odd_locks,
            |env| {
                let before = digest(env);
                let got = env
                    .manager()
                    .await
                    .lock("forever")
                    .try_acquire_for(WAIT)
                    .await?;
                assert!(got.is_none());
                assert_eq!(digest(env), before);
                Ok(())
            }
        ),
        row!(
            "a fenced lock's token counter of another type",
            WrongType,
            "the token is taken first, so nothing is written",
            with_odd_locks,
            |env| {
                let mgr = env.manager().await;
                mgr.fenced_lock("tok").try_acquire_for(WAIT).await.map(drop)
            }
        ),
        row!(
            "a fair lock's queue of another type",
            WrongType,
            "not a queue",
            with_odd_locks,
            |env| {
                let mgr = env.manager().await;
                mgr.fair_lock("fq").try_acquire_for(WAIT).await.map(drop)
            }
        ),
        row!(
            "fair lock wait timeout zero",
            Invalid,
            "every fair waiter would be dropped from the queue at once",
            |env| { start(env.config().fair_lock_wait_timeout(Duration::ZERO)).await }
        ),
        row!(
            "watchdog timeout 1 ms under its minimum",
            Invalid,
            "renewals a third of it apart would be too close",
            |env| {
                let timeout = lockman::MIN_WATCHDOG_TIMEOUT - Duration::from_millis(1);
                start(env.config().watchdog_timeout(timeout)).await
            }
        ),
        row!(
            "fair lock place timeout 1 ms under its minimum",
            Invalid,
            "a place refreshed every third of it would not outlive a refresh and its round trip",
            |env| {
                let timeout = lockman::MIN_FAIR_LOCK_PLACE_TIMEOUT - Duration::from_millis(1);
                start(env.config().fair_lock_place_timeout(timeout)).await
            }
        ),
        row!(
            "fair lock wait timeout 1 ms under the place minimum",
            Invalid,
            "every place waits at most this long and is refreshed every third of it",
            |env| {
                let timeout = lockman::MIN_FAIR_LOCK_PLACE_TIMEOUT - Duration::from_millis(1);
                start(env.config().fair_lock_wait_timeout(timeout)).await
            }
        ),
        row!(
            "database index out of range",
            Connect,
            "SELECT fails when connecting",
            |env| { start(Config::new(env.server.url().replace("/0", "/99"))).await }
        ),
        row!(
            "a unix socket path that does not exist",
            Connect,
            "nothing to connect to",
            |_env| { start(Config::new("redis+unix:///nonexistent/lockman.sock?db=0")).await }
        ),
        row!(
            "Redis busy running a long script (BUSY)",
            Unavailable,
            "retried within the wait (a script ends, or is killed), then `Unavailable` with \
             Redis's error as its cause; nothing was written",
            |env| {
                let mgr = env.manager().await;
                let lock = mgr.lock("b");
                let _: () = redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("busy-reply-threshold")
                    .arg(50)
                    .query(&mut env.raw())
                    .expect("CONFIG SET");
                let mut busy = env.raw();
                // Spins until killed below, once lockman has answered (10 s at most): Redis
                // stays busy however long a loaded machine takes to send the acquire (a
                // 1-2 s spin ended first once, and the acquire then took the lock).
                let script = std::thread::spawn(move || {
                    let spin = "local t = redis.call('time')[1] + 0 \
                                while redis.call('time')[1] + 0 < t + 10 do end return 1";
                    let _: redis::RedisResult<i64> =
                        redis::cmd("EVAL").arg(spin).arg(0).query(&mut busy);
                });
                // BUSY is what every client hears once the script has run 50 ms.
                let started = Instant::now();
                while redis::cmd("PING").query::<String>(&mut env.raw()).is_ok() {
                    assert!(started.elapsed() < Duration::from_secs(5), "never busy");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                let res = lock.try_acquire_for(WAIT).await.map(drop);
                // The script only reads: SCRIPT KILL ends it (NOTBUSY if it already ended).
                let _: redis::RedisResult<()> =
                    redis::cmd("SCRIPT").arg("KILL").query(&mut env.raw());
                tokio::task::spawn_blocking(move || script.join())
                    .await
                    .expect("join")
                    .expect("script thread");
                res
            }
        ),
        row!(
            "too few replicas for a write (NOREPLICAS)",
            Unavailable,
            "min-replicas-to-write is unmet: retried within the wait (a replica may come \
             back), then `Unavailable` with Redis's error as its cause",
            |env| {
                let mgr = env.manager().await;
                let lock = mgr.lock("r");
                let set = |n: u32| {
                    let _: () = redis::cmd("CONFIG")
                        .arg("SET")
                        .arg("min-replicas-to-write")
                        .arg(n)
                        .query(&mut env.raw())
                        .expect("CONFIG SET");
                };
                set(1);
                let res = lock.try_acquire_for(WAIT).await.map(drop);
                set(0);
                res
            }
        ),
        row!(
            "writes paused (CLIENT PAUSE WRITE)",
            Works,
            "the attempt waits in Redis, unanswered: at the deadline its last try gets 250 ms from \
             its sending, then `Unavailable` (Redis did not answer); the grant that comes once \
             the pause ends is given back",
            |env| {
                let mgr = env.manager().await;
                let lock = mgr.lock("p");
                let _: () = redis::cmd("CLIENT")
                    .arg("PAUSE")
                    .arg(800)
                    .arg("WRITE")
                    .query(&mut env.raw())
                    .expect("CLIENT PAUSE");
                let res = lock.try_acquire_for(WAIT).await;
                assert!(
                    matches!(res, Err(lockman::LockError::Unavailable { .. })),
                    "{res:?}"
                );
                let started = Instant::now();
                while dbsize(env) != 0 || started.elapsed() < Duration::from_millis(900) {
                    assert!(started.elapsed() < Duration::from_secs(5), "left behind");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(())
            }
        ),
        // Managers and actors.
        row!(
            "a manager used after shutdown",
            Shutdown,
            "its actors are gone",
            |env| {
                let mgr = env.manager().await;
                mgr.shutdown().await;
                mgr.lock("x").acquire().await.map(drop)
            }
        ),
        row!(
            "a guard released after its manager shut down",
            Shutdown,
            "shutdown released every hold already",
            |env| {
                let mgr = env.manager().await;
                let guard = mgr.lock("g").acquire().await?;
                mgr.shutdown().await;
                assert_eq!(dbsize(env), 0, "shutdown releases every hold");
                guard.release().await
            }
        ),
        row!(
            "Release sent to the actor of another lock",
            Invalid,
            "a grant belongs to one lock actor",
            |env| {
                let mgr = env.manager().await;
                let grant = mgr.lock("a").acquire().await?.into_grant();
                let b = mgr.lock("b").acquire().await?;
                let b_before: Vec<String> = env.raw().hgetall("b").expect("HGETALL");
                let res = b
                    .actor()
                    .send(Release(grant))
                    .await
                    .map_err(|_| LockError::Shutdown)?;
                let b_after: Vec<String> = env.raw().hgetall("b").expect("HGETALL");
                assert_eq!(b_after, b_before, "b untouched by a's grant");
                // The refused grant was dropped with the message: its hold is released the way
                // of a dropped guard's, through its own actor.
                assert!(
                    support::wait::eventually(Duration::from_secs(3), || dbsize(env) == 1).await,
                    "a released"
                );
                b.release().await?;
                res
            }
        ),
        row!(
            "Acquire sent to the actor of another name",
            Works,
            "an Acquire names no lock: it takes the lock of the actor it reaches",
            |env| {
                let mgr = env.manager().await;
                let holder = mgr.lock("a").holder_id();
                let b = mgr.lock_actor("b").await?;
                let acquire = Acquire {
                    holder: holder.as_str().into(),
                    lease: None,
                    wait: Wait::Up(WAIT),
                    kind: LockKind::Reentrant,
                    owner: Some(lockman::deadlock::current()),
                    site: Some(lockman::deadlock::site()),
                };
                let grant = b.send(acquire).await.map_err(|_| LockError::Shutdown)??;
                let grant = grant.expect("b is free");
                assert_eq!(grant.name(), "b");
                let field: Option<String> = env.raw().hget("b", &holder).expect("HGET");
                assert_eq!(field.as_deref(), Some("1"));
                assert!(!env.raw().exists::<_, bool>("a").expect("EXISTS"));
                b.send(Release(grant))
                    .await
                    .map_err(|_| LockError::Shutdown)?
            }
        ),
        row!(
            "RedLock with no members",
            Invalid,
            "no majority of nothing",
            |env| {
                let _mgr = env.manager().await;
                RedLock::new(Vec::new()).try_acquire().await.map(drop)
            }
        ),
        row!(
            "RedLock naming one server twice",
            Invalid,
            "one server would count as two votes",
            |env| {
                let mgr = env.manager().await;
                RedLock::new(vec![mgr.lock("r"), mgr.lock("r"), mgr.lock("r2")])
                    .try_acquire()
                    .await
                    .map(drop)
            }
        ),
        row!(
            "MultiLock with no members",
            Invalid,
            "nothing to lock",
            |env| {
                let _mgr = env.manager().await;
                MultiLock::new(Vec::new()).try_acquire().await.map(drop)
            }
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bad_input_matrix() {
    let rows = table();
    // RELIABILITY.md, "Bad input", counts the rows: 59.
    assert!(rows.len() >= 59, "{} rows", rows.len());
    let mut failures = Vec::new();
    println!("| input | outcome | why |\n|---|---|---|");
    for row in rows {
        println!("| {} | {:?} | {} |", row.input, row.outcome, row.why);
        let (setup, run) = (row.setup, row.run);
        let result = tokio::task::spawn_blocking(move || {
            let env = setup();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let before = digest(&env);
                let res = tokio::time::timeout(Duration::from_secs(20), run(&env)).await;
                (res, before, digest(&env))
            })
        })
        .await;
        match result {
            Err(panic) => failures.push(format!("{}: panicked: {panic:?}", row.input)),
            Ok((Err(_), _, _)) => failures.push(format!("{}: hung (20 s)", row.input)),
            Ok((Ok(res), before, after)) => {
                let got = Outcome::of(&res);
                if got != Some(row.outcome) {
                    failures.push(format!(
                        "{}: wanted {:?}, got {res:?}",
                        row.input, row.outcome
                    ));
                } else if res.is_err() && before != after {
                    failures.push(format!("{}: refused, yet Redis changed", row.input));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} rows failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The first result that is not `InvalidArgument`, else the last refusal.
fn all_invalid<const N: usize>(results: [Result<(), LockError>; N]) -> Result<(), LockError> {
    let mut last = Ok(());
    for res in results {
        match res {
            Err(LockError::InvalidArgument { .. }) => last = res,
            other => return other.and(Err(LockError::Shutdown)),
        }
    }
    last
}

/// Takes `name`, checks the exact hash, releases, and checks nothing is left.
async fn works_exactly(env: &Env, name: &str) -> Result<(), LockError> {
    let mgr = env.manager().await;
    let lock = mgr.lock(name);
    let guard = lock.acquire().await?;
    let field: Option<String> = env.raw().hget(name, lock.holder_id()).expect("HGET");
    assert_eq!(field.as_deref(), Some("1"));
    guard.release().await?;
    assert_eq!(dbsize(env), 0);
    Ok(())
}

async fn start(config: Config) -> Result<(), LockError> {
    LockManager::start(config).await.map(drop)
}

async fn within<T>(
    limit: Duration,
    f: impl Future<Output = Result<T, LockError>>,
) -> Result<T, LockError> {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| panic!("no answer within {limit:?}"))
}

/// The keys of locks: every key (lock requests write no other, docs/protocol.md "Sent again").
/// Every key but the managers' client records (written from a manager's first hold on).
fn lock_keys(env: &Env) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut env.raw())
        .expect("KEYS");
    keys.retain(|k| !k.starts_with("lockman_client:{lockman}"));
    keys.sort();
    keys
}

fn dbsize(env: &Env) -> u64 {
    lock_keys(env).len() as u64
}

/// A digest of the locks' data, expiries included.
fn digest(env: &Env) -> String {
    let mut raw = env.raw();
    let mut digest = String::new();
    for key in lock_keys(env) {
        let value: Vec<String> = redis::cmd("DEBUG")
            .arg("DIGEST-VALUE")
            .arg(&key)
            .query(&mut raw)
            .expect("DEBUG DIGEST-VALUE");
        let expires: i64 = redis::cmd("PEXPIRETIME")
            .arg(&key)
            .query(&mut raw)
            .expect("PEXPIRETIME");
        digest.push_str(&format!("{key}={value:?}@{expires};"));
    }
    digest
}

/// A server that answers every connection with an HTTP error, as a web server on the wrong
/// port would.
fn http_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(20) {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
            let _ = stream.read(&mut [0; 1024]);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        }
    });
    port
}

fn with_other_types() -> Env {
    let env = Env::plain();
    let mut raw = env.raw();
    let _: () = raw.set("text", "keep me").expect("SET");
    let _: () = raw.rpush("list", "a").expect("RPUSH");
    let _: () = raw.sadd("set", "a").expect("SADD");
    env
}

/// Lock keys out of shape: a foreign field that is not a count, a lock without TTL, a token
/// counter and a fair queue of other types.
fn with_odd_locks() -> Env {
    let env = Env::plain();
    let mut raw = env.raw();
    let _: () = raw.hset("foreign", "someone:1", "?").expect("HSET");
    let _: () = raw.pexpire("foreign", 60_000).expect("PEXPIRE");
    let _: () = raw.hset("forever", "someone:1", 1).expect("HSET");
    let _: () = raw.hset("redisson_lock_token:{tok}", "a", 1).expect("HSET");
    let _: () = raw.set("redisson_lock_queue:{fq}", "a").expect("SET");
    env
}

/// The first result that is not `WrongType`, else the last.
fn all_wrong_type(
    results: impl IntoIterator<Item = Result<(), LockError>>,
) -> Result<(), LockError> {
    let mut last = Ok(());
    for res in results {
        match res {
            Err(LockError::WrongType { .. }) => last = res,
            other => return other.and(Err(LockError::Shutdown)),
        }
    }
    last
}

fn with_password() -> Env {
    Env {
        server: RedisServer::start_with(Options {
            password: Some("right".into()),
            ..Options::default()
        }),
        _others: Vec::new(),
    }
}

/// A replica of a primary that holds nothing: its URL is what the row connects to.
fn replica() -> Env {
    let primary = RedisServer::start();
    let server = RedisServer::start_with(Options {
        args: vec![
            "--replicaof".into(),
            "127.0.0.1".into(),
            primary.port().to_string(),
        ],
        ..Options::default()
    });
    Env {
        server,
        _others: vec![primary],
    }
}

/// A server whose memory is full, with `noeviction`.
fn full() -> Env {
    let env = Env {
        server: RedisServer::start_with(Options {
            args: ["--maxmemory", "2mb", "--maxmemory-policy", "noeviction"]
                .map(String::from)
                .to_vec(),
            ..Options::default()
        }),
        _others: Vec::new(),
    };
    let _: () = redis::cmd("DEBUG")
        .arg("POPULATE")
        .arg(20_000)
        .arg("fill")
        .arg(200)
        .query(&mut env.raw())
        .expect("DEBUG POPULATE");
    env
}

/// Names with braces, quotes, spaces, non-ASCII, newlines, or that look like a channel: each
/// locks the key of exactly that name, and its waiters are woken on that name's channel.
#[tokio::test]
async fn awkward_names_work() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = LockManager::start(Config::new(server.url())).await.unwrap();
    let other = LockManager::start(Config::new(server.url())).await.unwrap();
    let long = "k".repeat(64 * 1024);
    let names = [
        "{braced}",
        "a{b}c",
        "}{",
        "quote\"s'",
        "with spaces",
        "锁🔒 ünïcödé",
        "new\nline",
        "redisson_lock__channel:{x}",
        long.as_str(),
    ];
    for name in names {
        let lock = mgr.lock(name);
        let guard = lock.acquire().await.unwrap();
        let field: Option<String> = raw.hget(name, lock.holder_id()).unwrap();
        assert_eq!(field.as_deref(), Some("1"), "{:.40}", name);
        // A waiter of another manager (one of the holder's own would be handed the lock inside
        // the release, with no message) is woken on the channel of that exact name.
        let waiter = {
            let lock = other.lock(name);
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                let g = lock.acquire().await.unwrap();
                g.release().await.unwrap();
                started.elapsed()
            })
        };
        // Redisson's channel: the name in a hash tag, unless it has braces of its own.
        let channel = if name.contains('{') {
            format!("redisson_lock__channel:{name}")
        } else {
            format!("redisson_lock__channel:{{{name}}}")
        };
        support::wait::subscribers(&mut raw, &channel, 1).await;
        support::wait::quiet(&mut raw).await;
        guard.release().await.unwrap();
        let waited = waiter.await.unwrap();
        assert!(
            waited < Duration::from_secs(2),
            "{:.40}: woken by the message, {waited:?}",
            name
        );
        assert!(!lock.is_locked().await.unwrap());
    }
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut raw).unwrap();
    let left: Vec<&String> = keys
        .iter()
        .filter(|k| !k.starts_with("lockman_client:{lockman}"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
