//! Redis away is an error, never contention (issue 57; the table is in the crate docs, "When
//! Redis is away", and docs/outages.md). With the server stopped (SIGKILL), frozen (SIGSTOP)
//! and refusing every write (`NOREPLICAS`: `min-replicas-to-write 1` and no replica), every way
//! in answers as the table says, within its bound:
//! - a bounded wait: `Err(LockError::Unavailable)` at its deadline (a RedLock:
//!   `QuorumNotReached`; a single attempt: Redis's own retryable error);
//! - an unbounded wait: `Err(LockError::Unavailable)` once Redis has been away for
//!   `Config::unavailable_after`;
//! - a holder is still contention: `Ok(None)`, also when Redis was away during the wait and came
//!   back before its end; Redis going away after a busy answer is `Unavailable`;
//! - the tower layers answer 503 with `Retry-After` (never 409/429) during an outage, and
//!   409/429 for a real holder; so does the actix-web extractor;
//! - `lockman exec` exits 69 with one line naming the cause, never 75.
//!
//! Short bounds keep the file quick: a 1 s wait, a 1 s response timeout, a 2 s
//! `unavailable_after`, and every way in at once.

mod support;

#[cfg(feature = "metrics")]
use support::recorder;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockManager, MultiLock, RedLock};
use support::{Options, RedisServer};

/// The bounded waits' wait.
const WAIT: Duration = Duration::from_secs(1);
/// `Config::response_timeout` and `connect_timeout`.
const RESPONSE: Duration = Duration::from_secs(1);
/// `Config::unavailable_after`.
const BOUND: Duration = Duration::from_secs(2);
/// What an answer may come after its bound: a backoff step (at most 2 s between retries is the
/// state's, but the bound's timer does not wait for one), scheduling.
const LATE: Duration = Duration::from_millis(1_500);

/// A short watchdog timeout too: requests whose reply never came are sent again for a third
/// of it, so managers shut down with Redis away quickly.
fn config(server: &RedisServer) -> Config {
    Config::new(server.url())
        .watchdog_timeout(Duration::from_secs(3))
        .response_timeout(RESPONSE)
        .connect_timeout(RESPONSE)
        .unavailable_after(BOUND)
}

type Outcome = Result<bool, LockError>;
type Way = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// What a way in should answer during an outage.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// `Err(Unavailable)` within `bound + LATE`, not before `at_least`.
    Unavailable,
    /// A RedLock whose members all failed: `Err(QuorumNotReached)`.
    Quorum,
    /// A single attempt: Redis's own retryable error, at once.
    Retryable,
    /// Redis answered (a read during `NOREPLICAS`): `Ok(false)` at its deadline.
    Contention,
}

/// One way in: its name, its future, what it should answer, and its bound.
struct Case {
    what: &'static str,
    way: Way,
    expect: Expect,
    bound: Duration,
}

fn got<T>(res: Result<Option<T>, LockError>) -> Outcome {
    res.map(|g| g.is_some())
}

/// Whether a wait listens on the unlock channel of the lock `name` (it found it busy).
fn listening(raw: &mut redis::Connection, name: &str) -> bool {
    let (_, n): (String, u32) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(format!("redisson_lock__channel:{{{name}}}"))
        .query(raw)
        .unwrap();
    n >= 1
}

/// `lockman exec --wait 2s job -- true` on `server`, its environment's URLs left out.
#[cfg(feature = "cli")]
fn exec_job(server: &RedisServer) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_lockman"));
    cmd.args(["--url", &server.url(), "--connect-timeout", "1s"])
        .args(["exec", "--wait", "2s", "job", "--", "true"])
        .env_remove("LOCKMAN_URL")
        .env_remove("REDIS_URL");
    cmd
}

/// Every way in on names under `tag`, bounded (`WAIT`) and unbounded (`BOUND`).
fn every_way_in(m: &LockManager, tag: &str, unbounded: bool) -> Vec<Case> {
    let n = |s: &str| format!("{tag}:{s}");
    let mut cases: Vec<Case> = Vec::new();
    let mut add = |what, way: Way, expect, bound| {
        cases.push(Case {
            what,
            way,
            expect,
            bound,
        })
    };
    let spin = m.spin_lock(n("spin"));
    let group: lockman::Lock = (*m.group_lock(n("group"), ["a", "b"]).unwrap()).clone();
    let (l, f, rw, fe, nr) = (
        m.lock(n("lock")),
        m.fair_lock(n("fair")),
        m.read_write_lock(n("rw")),
        m.fenced_lock(n("fenced")),
        m.non_reentrant_lock(n("nr")),
    );
    let (s, p, latch, e) = (
        m.semaphore(n("sem")),
        m.permit_semaphore(n("permits")),
        m.count_down_latch(n("latch")),
        m.election(n("election")),
    );
    let multi = MultiLock::new(vec![m.lock(n("m1")), m.lock(n("m2"))]);
    let red = RedLock::new(vec![m.lock(n("r1")), m.lock(n("r2")), m.lock(n("r3"))]);
    use Expect::*;
    {
        let l = l.clone();
        add(
            "lock",
            Box::pin(async move { got(l.try_acquire_for(WAIT).await) }),
            Unavailable,
            WAIT,
        );
    }
    {
        let l = l.clone();
        add(
            "lock once",
            Box::pin(async move { got(l.try_acquire().await) }),
            Retryable,
            RESPONSE,
        );
    }
    {
        let f = f.clone();
        add(
            "fair",
            Box::pin(async move { got(f.try_acquire_for(WAIT).await) }),
            Unavailable,
            WAIT,
        );
    }
    {
        let r = rw.read();
        add(
            "read",
            Box::pin(async move { got(r.try_acquire_for(WAIT).await) }),
            Unavailable,
            WAIT,
        );
    }
    {
        let w = rw.write();
        add(
            "write",
            Box::pin(async move { got(w.try_acquire_for(WAIT).await) }),
            Unavailable,
            WAIT,
        );
    }
    add(
        "fenced",
        Box::pin(async move { got(fe.try_acquire_for(WAIT).await) }),
        Unavailable,
        WAIT,
    );
    add(
        "non-reentrant",
        Box::pin(async move { got(nr.try_acquire_for(WAIT).await) }),
        Unavailable,
        WAIT,
    );
    {
        let spin = spin.clone();
        add(
            "spin",
            Box::pin(async move { got(spin.try_acquire_for(WAIT).await) }),
            Unavailable,
            WAIT,
        );
    }
    {
        let s = s.clone();
        add(
            "semaphore",
            Box::pin(async move { got(s.try_acquire_for(1, WAIT).await) }),
            Unavailable,
            WAIT,
        );
    }
    {
        let p = p.clone();
        add(
            "permit semaphore",
            Box::pin(async move { got(p.try_acquire_for(1, WAIT).await) }),
            Unavailable,
            WAIT,
        );
    }
    {
        let latch = latch.clone();
        add(
            "latch",
            Box::pin(async move { latch.wait_for(WAIT).await }),
            Unavailable,
            WAIT,
        );
    }
    {
        let e = e.clone();
        add(
            "election",
            Box::pin(async move { got(e.try_campaign_for(WAIT).await) }),
            Unavailable,
            WAIT,
        );
    }
    {
        let multi = multi.clone();
        add(
            "multilock",
            Box::pin(async move { got(multi.try_acquire_for(WAIT).await) }),
            Unavailable,
            WAIT,
        );
    }
    {
        let red = red.clone();
        add(
            "redlock",
            Box::pin(async move { got(red.try_acquire_for(WAIT).await) }),
            Quorum,
            WAIT,
        );
    }
    {
        let group = group.clone();
        add(
            "group",
            Box::pin(async move { got(group.try_acquire_for(WAIT).await) }),
            Unavailable,
            WAIT,
        );
    }
    if unbounded {
        add(
            "group unbounded",
            Box::pin(async move { group.acquire().await.map(|_| true) }),
            Unavailable,
            BOUND,
        );
        add(
            "spin unbounded",
            Box::pin(async move { spin.acquire().await.map(|_| true) }),
            Unavailable,
            BOUND,
        );
        // Too many members failed for a quorum for `unavailable_after`: the RedLock's own error.
        add(
            "redlock unbounded",
            Box::pin(async move { red.acquire().await.map(|_| true) }),
            Quorum,
            BOUND,
        );
        add(
            "lock unbounded",
            Box::pin(async move { l.acquire().await.map(|_| true) }),
            Unavailable,
            BOUND,
        );
        add(
            "fair unbounded",
            Box::pin(async move { f.acquire().await.map(|_| true) }),
            Unavailable,
            BOUND,
        );
        add(
            "semaphore unbounded",
            Box::pin(async move { s.acquire(1).await.map(|_| true) }),
            Unavailable,
            BOUND,
        );
        add(
            "permits unbounded",
            Box::pin(async move { p.acquire(1).await.map(|_| true) }),
            Unavailable,
            BOUND,
        );
        add(
            "latch unbounded",
            Box::pin(async move { latch.wait().await.map(|()| true) }),
            Unavailable,
            BOUND,
        );
        add(
            "election unbounded",
            Box::pin(async move { e.campaign().await.map(|_| true) }),
            Unavailable,
            BOUND,
        );
        add(
            "multilock unbounded",
            Box::pin(async move { multi.acquire().await.map(|_| true) }),
            Unavailable,
            BOUND,
        );
    }
    cases
}

/// Runs every case at once; checks each answer and when it came. `extra`: how much later than
/// its bound an answer may come beyond `LATE` (a frozen server's first attempt takes a response
/// timeout to fail).
async fn check(cases: Vec<Case>, extra: Duration) {
    let started = Instant::now();
    let runs = cases.into_iter().map(|c| async move {
        // A wait that never ends fails the test rather than hanging it.
        let limit = c.bound + LATE + extra + Duration::from_secs(5);
        let res = tokio::time::timeout(limit, c.way)
            .await
            .unwrap_or_else(|_| {
                Err(LockError::Timeout {
                    op: "the test's own limit: the wait never ended",
                    after: limit,
                })
            });
        (c.what, c.expect, c.bound, res, started.elapsed())
    });
    let mut wrong = Vec::new();
    for (what, expect, bound, res, took) in futures_util::future::join_all(runs).await {
        let answered = match (&res, expect) {
            (Err(LockError::Unavailable { name, cause, .. }), Expect::Unavailable) => {
                !name.is_empty() && cause.is_retryable()
            }
            (Err(e @ LockError::QuorumNotReached { .. }), Expect::Quorum) => e.is_retryable(),
            (Err(e), Expect::Retryable) => {
                e.is_retryable() && !matches!(e, LockError::Unavailable { .. })
            }
            (Ok(false), Expect::Contention) => true,
            _ => false,
        };
        if !answered {
            wrong.push(format!("{what}: {res:?}, expected {expect:?}"));
            continue;
        }
        if let Err(e) = &res {
            assert!(e.is_retryable(), "{what}: {e:?}");
        }
        // A bounded wait ends no sooner than its deadline (a single attempt at once).
        let at_least = if expect == Expect::Retryable {
            Duration::ZERO
        } else {
            bound.min(WAIT)
        };
        if took < at_least || took > bound + LATE + extra {
            wrong.push(format!(
                "{what}: answered after {took:?}, expected within {at_least:?}..{:?}",
                bound + LATE + extra
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_server_stopped_every_way_in_is_unavailable_within_its_bound() {
    #[cfg(feature = "metrics")]
    let unavailable = |kind: &str| {
        let series = ["lockman_acquire_total", "lockman_sync_wait_total"]
            .map(|name| format!("{name}{{kind={kind},outcome=unavailable}}"));
        let values = recorder::recorded().values.lock().unwrap();
        series.iter().filter_map(|s| values.get(s)).sum::<f64>()
    };
    #[cfg(feature = "metrics")]
    let before = (unavailable("lock"), unavailable("semaphore"));
    let mut server = RedisServer::start();
    let m = LockManager::start(config(&server)).await.unwrap();
    server.stop();
    check(every_way_in(&m, "stopped", true), Duration::ZERO).await;
    // Metrics tell an outage from a holder: `unavailable`, not `timed_out`. The lock's: its
    // bounded and unbounded waits (the single attempt fails with Redis's own error).
    #[cfg(feature = "metrics")]
    {
        assert!(
            unavailable("lock") >= before.0 + 2.0,
            "{}",
            unavailable("lock")
        );
        assert!(
            unavailable("semaphore") >= before.1 + 2.0,
            "{}",
            unavailable("semaphore")
        );
    }
    // The bound's error says what Redis did and which name waited.
    let err = m.lock("said").acquire().await.unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("redis is unavailable"), "{text}");
    assert!(text.contains("\"said\""), "{text}");
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_server_frozen_every_way_in_is_unavailable_within_its_bound() {
    let server = RedisServer::start();
    let m = LockManager::start(config(&server)).await.unwrap();
    server.pause(support::FROZEN).expect("pause the server");
    // The first attempt's reply never comes: it fails after a response timeout, and the bound
    // counts from when it was sent.
    check(every_way_in(&m, "frozen", true), RESPONSE).await;
    server.resume().expect("resume the server");
    m.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_writes_refused_noreplicas_every_waiting_write_is_unavailable() {
    let server = RedisServer::start();
    let m = LockManager::start(config(&server)).await.unwrap();
    let mut raw = server.conn();
    // A closed latch is read, not written: Redis answers it.
    assert!(
        m.count_down_latch("refused:latch")
            .try_set_count(1)
            .await
            .unwrap()
    );
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg(1)
        .query(&mut raw)
        .unwrap();
    let cases = every_way_in(&m, "refused", true)
        .into_iter()
        // An unbounded latch wait reads, is answered, and waits on.
        .filter(|c| c.what != "latch unbounded")
        .map(|mut c| {
            if c.what == "latch" {
                c.expect = Expect::Contention;
            }
            c
        })
        .collect();
    check(cases, Duration::ZERO).await;
    // The cause is Redis's own refusal.
    let err = m
        .lock("refused:said")
        .try_acquire_for(WAIT)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Unavailable { cause, .. } if cause.to_string().contains("NOREPLICAS")),
        "{err:?}"
    );
    // Nothing was written.
    let keys: Vec<String> = redis::cmd("KEYS").arg("refused:*").query(&mut raw).unwrap();
    assert!(keys.iter().all(|k| k.contains("latch")), "{keys:?}");
    m.shutdown().await;
}

/// A holder is contention, an outage is not: busy, then the server dies, then the deadline is
/// `Unavailable`; the server away, then back with the lock held, then the deadline is `Ok(None)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_answer_decides_between_a_holder_and_an_outage() {
    // Persisted, so that the hold is there again after a restart.
    let mut server = RedisServer::start_with(Options {
        args: ["--appendonly", "yes", "--appendfsync", "always"]
            .map(String::from)
            .to_vec(),
        ..Options::default()
    });
    let mut raw = server.conn();
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg("held")
        .arg("someone-else:1")
        .arg(1)
        .cmd("PEXPIRE")
        .arg("held")
        .arg(120_000)
        .query(&mut raw)
        .unwrap();
    let m = LockManager::start(config(&server)).await.unwrap();
    let lock = m.lock("held");

    // Held all along: contention.
    assert!(matches!(lock.try_acquire_for(WAIT).await, Ok(None)));

    // Busy, then the server dies: at the deadline Redis is away.
    support::commands::reset_stats(&mut raw);
    let waiting = tokio::spawn({
        let lock = lock.clone();
        // Shorter than `BOUND`: its deadline, not the bound, ends it.
        async move { lock.try_acquire_for(Duration::from_millis(1_500)).await }
    });
    // Found busy, it listens, and tries once more when the subscription is confirmed (a release
    // may have come between): after that, only a message, the TTL or an outage wakes it.
    assert!(
        support::wait::eventually(Duration::from_secs(2), || listening(&mut raw, "held")
            && support::commands::command_calls(&mut raw, "evalsha") >= 2)
        .await,
        "the wait found the lock busy, twice"
    );
    server.stop();
    let res = waiting.await.unwrap();
    assert!(matches!(res, Err(LockError::Unavailable { .. })), "{res:?}");

    // Away, then back (with the hold, from its append-only file) before the deadline: the last
    // answer was a holder.
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { lock.try_acquire_for(Duration::from_secs(8)).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.restart();
    let res = waiting.await.unwrap();
    assert!(matches!(res, Ok(None)), "{res:?}");
    m.shutdown().await;
}

/// A refusal that is not an outage (`WRONGTYPE` here: a string stored under the lock's name;
/// `OOM` and `NOPERM` take the same path) fails the waiter whose attempt it answered, and the
/// turn passes on: the waits queued behind that attempt try too and each gets its own answer.
/// Before, nothing woke them (the lock is free: no unlock message, no TTL): an unbounded
/// `acquire()` waited for good and a bounded wait came back `Ok(None)`, contention with nobody
/// holding. The server's writes are paused so that the first attempt is under way while the
/// other two queue behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_attempt_passes_the_turn_to_the_waits_queued_behind_it() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    // A response timeout longer than the pause: the attempt's reply comes, late.
    let m = LockManager::start(config(&server).response_timeout(Duration::from_secs(10)))
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("refused")
        .arg("not a lock")
        .query(&mut raw)
        .unwrap();
    let pause = Duration::from_millis(1_500);
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(pause.as_millis() as u64)
        .arg("WRITE")
        .query(&mut raw)
        .unwrap();
    let began = Instant::now();
    let bounded = |m: &LockManager| {
        let lock = m.lock("refused");
        tokio::spawn(async move { got(lock.try_acquire_for(Duration::from_secs(20)).await) })
    };
    let first = bounded(&m);
    let unbounded = {
        let lock = m.lock("refused");
        tokio::spawn(async move { lock.acquire().await.map(|_| true) })
    };
    let third = bounded(&m);
    let limit = pause + Duration::from_secs(5);
    for (what, task) in [("first", first), ("acquire()", unbounded), ("third", third)] {
        let res = tokio::time::timeout(limit.saturating_sub(began.elapsed()), task)
            .await
            .unwrap_or_else(|_| panic!("{what} still waits {limit:?} after the refusal began"))
            .unwrap();
        assert!(
            matches!(&res, Err(e) if !e.is_retryable()),
            "{what}: {res:?} (the lock was never held: the refusal is the answer)"
        );
    }
    // Nothing was taken: the string is still there, alone.
    let kind: String = redis::cmd("TYPE").arg("refused").query(&mut raw).unwrap();
    assert_eq!(kind, "string");
    m.shutdown().await;
}

/// At its deadline a wait is answered by what Redis says then, not by what it said last. A
/// wait that found a holder, then saw the server freeze, ended `Ok(None)` at its deadline: a
/// holder reported for an outage. A 200 ms wait (the HTTP layers' usual) on a free name of a
/// frozen server ended `Ok(None)` too, its request under way for less than 250 ms: the layers
/// answered 409 "busy" where nobody held anything. Now each is at its last try: what Redis
/// answers within 250 ms of the request decides, and nothing is `Unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_its_deadline_a_wait_asks_redis_rather_than_trusting_its_last_answer() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg("held")
        .arg("someone-else:1")
        .arg(1)
        .cmd("PEXPIRE")
        .arg("held")
        .arg(120_000)
        .query(&mut raw)
        .unwrap();
    let m = LockManager::start(config(&server)).await.unwrap();
    // A holder, answering: contention, as ever.
    assert!(matches!(
        m.lock("held").try_acquire_for(WAIT).await,
        Ok(None)
    ));

    // Found busy, then the server freezes before the deadline.
    let wait = Duration::from_secs(2);
    let began = Instant::now();
    let waiting = tokio::spawn({
        let lock = m.lock("held");
        async move { lock.try_acquire_for(wait).await }
    });
    assert!(
        support::wait::eventually(Duration::from_secs(2), || listening(&mut raw, "held")).await,
        "the wait found the lock busy and listens"
    );
    server.pause(support::FROZEN).expect("pause the server");
    let res = waiting.await.unwrap();
    let took = began.elapsed();
    server.resume().expect("resume the server");
    assert!(
        matches!(res, Err(LockError::Unavailable { .. })),
        "a frozen server after a busy answer: {res:?}"
    );
    assert!(took < wait + LATE, "answered after {took:?}");

    // A short wait on a free name of a frozen server.
    let wait = Duration::from_millis(200);
    server.pause(support::FROZEN).expect("pause the server");
    let began = Instant::now();
    let res = m.lock("free").try_acquire_for(wait).await;
    let took = began.elapsed();
    server.resume().expect("resume the server");
    assert!(
        matches!(res, Err(LockError::Unavailable { .. })),
        "a 200 ms wait on a frozen server: {res:?}"
    );
    assert!(took < wait + LATE, "answered after {took:?}");
    m.shutdown().await;
}

/// How Redis goes away under the HTTP fronts.
#[cfg(any(feature = "tower", feature = "actix-web"))]
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// SIGKILL: connections refused.
    Stopped,
    /// SIGSTOP: replies never come.
    Frozen,
    /// `min-replicas-to-write 1` without a replica: every write refused `NOREPLICAS`.
    Refusing,
}

#[cfg(any(feature = "tower", feature = "actix-web"))]
impl Fault {
    fn impose(self, server: &mut RedisServer) {
        match self {
            Fault::Stopped => server.stop(),
            Fault::Frozen => server.pause(support::FROZEN).expect("pause the server"),
            Fault::Refusing => {
                let _: () = redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("min-replicas-to-write")
                    .arg(1)
                    .query(&mut server.conn())
                    .unwrap();
            }
        }
    }

    /// Lets the managers shut down promptly (a frozen server's requests would wait).
    fn lift(self, server: &mut RedisServer) {
        if let Fault::Frozen = self {
            server.resume().expect("resume the server");
        }
    }

    /// How long after the wait an answer may come: the same for every fault (a permit
    /// layer's setting of its permits is part of its wait, frozen server or not).
    fn late(self) -> Duration {
        match self {
            Fault::Frozen | Fault::Stopped | Fault::Refusing => LATE,
        }
    }
}

/// An HTTP/1.1 answer as read off the wire: its status, its head (lower-cased) and body.
#[cfg(feature = "tower")]
async fn http_post(port: u16, path: &str) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .expect("an answer within 30 s")
        .unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_owned())
}

/// The tower layers: a real holder is 409 (a lock) or 429 (a permit); Redis away is 503 with
/// `Retry-After`, after the wait, and the handler never runs.
#[cfg(feature = "tower")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tower_layers_answer_503_for_an_outage_and_409_or_429_for_a_holder() {
    tower_layers_under(Fault::Stopped).await;
}

#[cfg(feature = "tower")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tower_layers_answer_503_with_the_server_frozen() {
    tower_layers_under(Fault::Frozen).await;
}

#[cfg(feature = "tower")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tower_layers_answer_503_with_writes_refused_noreplicas() {
    tower_layers_under(Fault::Refusing).await;
}

#[cfg(feature = "tower")]
async fn tower_layers_under(fault: Fault) {
    use axum::Router;
    use axum::routing::post;
    use lockman::tower::{LockLayer, PermitLayer};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let mut server = RedisServer::start();
    let m = LockManager::start(config(&server)).await.unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let handler = {
        let ran = ran.clone();
        move || {
            ran.fetch_add(1, Ordering::SeqCst);
            async { "done" }
        }
    };
    let wait = Duration::from_millis(500);
    let app = Router::new()
        .route("/locked/{name}", post(handler.clone()))
        .route_layer(LockLayer::segment(m.clone(), 1).wait(wait))
        .merge(
            Router::new()
                .route("/limited/{name}", post(handler))
                .route_layer(PermitLayer::segment(m.clone(), 1, 1).wait(wait)),
        );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });

    // A real holder, in another manager: the lock and the only permit.
    let holder = LockManager::start(config(&server)).await.unwrap();
    let _lock = holder.lock("busy").acquire().await.unwrap();
    let few = holder.permit_semaphore("few");
    assert!(few.try_set_permits(1).await.unwrap());
    let _permit = few.acquire(1).await.unwrap();
    for (path, status) in [("/locked/busy", 409), ("/limited/few", 429)] {
        let (got, head, body) = http_post(port, path).await;
        assert_eq!(got, status, "{path}: {body}");
        assert!(head.contains("retry-after:"), "{path}: {head}");
    }

    fault.impose(&mut server);
    for path in ["/locked/busy", "/limited/few", "/locked/other"] {
        if let (Fault::Refusing, "/locked/busy") = (fault, path) {
            // Redis still answers that the name is held (the script writes nothing then):
            // contention, told as such.
            let (got, _, body) = http_post(port, path).await;
            assert_eq!(got, 409, "{fault:?} {path}: {body}");
            continue;
        }
        let started = Instant::now();
        let (got, head, body) = http_post(port, path).await;
        let took = started.elapsed();
        assert_eq!(got, 503, "{fault:?} {path}: {body}");
        assert!(head.contains("retry-after:"), "{fault:?} {path}: {head}");
        // The body says nothing of the inside (the error is logged): the status alone tells
        // an outage from a holder.
        assert_eq!(body, "lock service unavailable", "{fault:?} {path}");
        assert!(took <= wait + fault.late(), "{fault:?} {path}: {took:?}");
    }
    assert_eq!(ran.load(Ordering::SeqCst), 0, "a refused request ran");
    fault.lift(&mut server);
    m.shutdown().await;
    holder.shutdown().await;
}

/// The actix-web extractors: the same answers as the tower layers.
#[cfg(feature = "actix-web")]
#[actix_rt::test]
async fn actix_web_extractors_answer_503_for_an_outage_and_409_or_429_for_a_holder() {
    actix_web_extractors_under(Fault::Stopped).await;
}

#[cfg(feature = "actix-web")]
#[actix_rt::test]
async fn actix_web_extractors_answer_503_with_the_server_frozen() {
    actix_web_extractors_under(Fault::Frozen).await;
}

#[cfg(feature = "actix-web")]
#[actix_rt::test]
async fn actix_web_extractors_answer_503_with_writes_refused_noreplicas() {
    actix_web_extractors_under(Fault::Refusing).await;
}

#[cfg(feature = "actix-web")]
async fn actix_web_extractors_under(fault: Fault) {
    use actix_web::{App, HttpResponse, test, web};
    use lockman::web::{RequestGuard, RequestLock, RequestPermit, RequestPermits};

    async fn locked(_guard: RequestGuard) -> HttpResponse {
        HttpResponse::Ok().finish()
    }
    async fn limited(_permit: RequestPermit) -> HttpResponse {
        HttpResponse::Ok().finish()
    }

    let mut server = RedisServer::start();
    let m = LockManager::start(config(&server)).await.unwrap();
    let wait = Duration::from_millis(500);
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/locked")
                    .app_data(RequestLock::path(m.clone(), "name").wait(wait))
                    .route("/{name}", web::post().to(locked)),
            )
            .service(
                web::scope("/limited")
                    .app_data(RequestPermits::path(m.clone(), "name", 1).wait(wait))
                    .route("/{name}", web::post().to(limited)),
            ),
    )
    .await;

    let holder = LockManager::start(config(&server)).await.unwrap();
    let _lock = holder.lock("busy").acquire().await.unwrap();
    let few = holder.permit_semaphore("few");
    assert!(few.try_set_permits(1).await.unwrap());
    let _permit = few.acquire(1).await.unwrap();
    let answer = |path: &'static str| {
        let req = test::TestRequest::post().uri(path).to_request();
        test::call_service(&app, req)
    };
    for (path, status) in [("/locked/busy", 409), ("/limited/few", 429)] {
        let res = answer(path).await;
        assert_eq!(res.status().as_u16(), status, "{path}");
        assert!(res.headers().contains_key("retry-after"), "{path}");
    }

    fault.impose(&mut server);
    for path in ["/locked/busy", "/limited/few", "/locked/other"] {
        if let (Fault::Refusing, "/locked/busy") = (fault, path) {
            // Redis still answers that the name is held (the script writes nothing then):
            // contention, told as such.
            assert_eq!(
                answer(path).await.status().as_u16(),
                409,
                "{fault:?} {path}"
            );
            continue;
        }
        let started = Instant::now();
        let res = answer(path).await;
        let took = started.elapsed();
        assert_eq!(res.status().as_u16(), 503, "{fault:?} {path}");
        assert!(
            res.headers().contains_key("retry-after"),
            "{fault:?} {path}"
        );
        assert!(took <= wait + fault.late(), "{fault:?} {path}: {took:?}");
    }
    fault.lift(&mut server);
    m.shutdown().await;
    holder.shutdown().await;
}

/// `lockman exec`: a wait that ends with Redis away exits 69 with one line naming the cause
/// (never 75, "not acquired within"); a holder is still 75.
#[cfg(feature = "cli")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockman_exec_exits_69_naming_the_cause_when_redis_is_away() {
    let mut server = RedisServer::start();
    let holder = LockManager::start(config(&server)).await.unwrap();
    let _held = holder.lock("job").acquire().await.unwrap();
    let out = exec_job(&server).output().unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");

    // Started while Redis answers (it finds the lock held), then Redis goes away.
    let child = exec_job(&server)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut raw = server.conn();
    // (A process started on a loaded machine may take seconds to get to its wait; it then
    // listens for its 2 s wait, which this sees.)
    assert!(
        support::wait::eventually(Duration::from_secs(20), || listening(&mut raw, "job")).await,
        "exec waits for the lock"
    );
    server.stop();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("redis is unavailable"), "{stderr}");
    assert!(!stderr.contains("not acquired within"), "{stderr}");
    holder.shutdown().await;
}

/// A frozen server, the lock found held first: `lockman exec --wait 2s` says Redis is
/// unavailable (exit 69, not 75: the holder's word is older than the freeze) and exits soon
/// after its wait, not after its manager's releases were resent for a third of the watchdog
/// timeout (it printed its line 15 s after its wait ended).
#[cfg(feature = "cli")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockman_exec_on_a_frozen_server_exits_69_soon_after_its_wait() {
    let server = RedisServer::start();
    let holder = LockManager::start(config(&server)).await.unwrap();
    let held = holder.lock("job").acquire().await.unwrap();
    let wait = Duration::from_secs(2);
    let began = Instant::now();
    let child = exec_job(&server)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut raw = server.conn();
    assert!(
        support::wait::eventually(Duration::from_secs(20), || listening(&mut raw, "job")).await,
        "exec waits for the lock"
    );
    server.pause(support::FROZEN).expect("pause the server");
    let out = child.wait_with_output().unwrap();
    let took = began.elapsed();
    server.resume().expect("resume the server");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("redis is unavailable"), "{stderr}");
    // Its wait, its last try's 250 ms, and at most the command's 3 s for its shutdown.
    assert!(
        took < wait + Duration::from_secs(5),
        "exited after {took:?}"
    );
    drop(held);
    holder.shutdown().await;
}

/// The other waiting verbs of `lockman` map an outage alike: `elect` (an unbounded wait for the
/// leadership, ended by `Config::unavailable_after`, 15 s) and `latch wait --timeout` exit 69 in
/// one line when the server stops during their wait; `exec` exits 69 naming Redis's refusal when
/// every write is refused (`NOREPLICAS`), never 75.
#[cfg(feature = "cli")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockman_elect_latch_wait_and_a_refused_exec_exit_69() {
    let cli = |server: &RedisServer, args: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_lockman"));
        cmd.args(["--url", &server.url(), "--connect-timeout", "1s"])
            .args(args)
            .env_remove("LOCKMAN_URL")
            .env_remove("REDIS_URL")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        cmd
    };
    let one_line_69 = |out: std::process::Output, cause: &str| {
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(69), "{stderr}");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(lines[0].contains(cause), "{stderr}");
        assert!(!stderr.contains("not acquired within"), "{stderr}");
    };

    // `exec` while every write is refused: Redis's own word, exit 69.
    let server = RedisServer::start();
    let mut raw = server.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg(1)
        .query(&mut raw)
        .unwrap();
    let out = cli(&server, &["exec", "--wait", "1s", "job", "--", "true"])
        .output()
        .unwrap();
    one_line_69(out, "NOREPLICAS");
    drop(server);

    // `elect` behind a leader, and `latch wait` on a closed latch, then the server stops.
    let mut server = RedisServer::start();
    let holder = LockManager::start(config(&server)).await.unwrap();
    let leader = holder.election("lead").campaign().await.unwrap();
    assert!(
        holder
            .count_down_latch("gate")
            .try_set_count(1)
            .await
            .unwrap()
    );
    let elect = cli(&server, &["elect", "lead", "--", "true"])
        .spawn()
        .unwrap();
    let latch = cli(&server, &["latch", "gate", "wait", "--timeout", "60s"])
        .spawn()
        .unwrap();
    let mut raw = server.conn();
    assert!(
        support::wait::eventually(Duration::from_secs(20), || listening(&mut raw, "lead")).await,
        "elect waits for the leadership"
    );
    // A latch waiter listens on the latch's channel.
    assert!(
        support::wait::eventually(Duration::from_secs(20), || {
            let (_, n): (String, u32) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg("redisson_countdownlatch__channel__{gate}")
                .query(&mut raw)
                .unwrap();
            n >= 1
        })
        .await,
        "latch wait waits for the latch"
    );
    let stopped = Instant::now();
    server.stop();
    let (elect, latch) = (
        elect.wait_with_output().unwrap(),
        latch.wait_with_output().unwrap(),
    );
    let took = stopped.elapsed();
    one_line_69(elect, "redis is unavailable");
    one_line_69(latch, "redis is unavailable");
    // `elect`'s 15 s bound (the latch's 60 s timeout is not what ended it), its shutdown.
    assert!(took < Duration::from_secs(25), "exited after {took:?}");
    drop(leader);
    holder.shutdown().await;
}

/// The bound of a bounded wait on a frozen server: its deadline, its last try (250 ms), and
/// scheduling on a loaded machine. Far under the response timeout the overruns took.
const NEAR: Duration = Duration::from_millis(1_000);

/// A response timeout longer than the waits below, as the default (3 s) is longer than an HTTP
/// layer's wait: an answer held for a reply that never comes shows as an overrun of seconds.
fn slow_to_give_up(server: &RedisServer) -> Config {
    config(server)
        .response_timeout(Duration::from_secs(4))
        .connect_timeout(Duration::from_secs(4))
}

/// A fair lock's wait on a frozen server ends near its deadline, and its `waited` is the time
/// it really waited: its leave of the queue is sent after its answer, and not waited for.
/// Breaks it: answering a fair waiter after its leave (it came two response timeouts after the
/// deadline, the attempt's and the leave's, with `waited` the wait's length).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_wait_on_a_frozen_server_ends_near_its_deadline_and_says_what_it_waited() {
    let server = RedisServer::start();
    let m = LockManager::start(slow_to_give_up(&server)).await.unwrap();
    let wait = Duration::from_secs(1);

    // A free name: the first attempt's reply never comes.
    server.pause(support::FROZEN).expect("pause the server");
    let began = Instant::now();
    let res = m.fair_lock("fair:free").try_acquire_for(wait).await;
    let took = began.elapsed();
    server.resume().expect("resume the server");
    let Err(LockError::Unavailable { waited, .. }) = res else {
        panic!("a fair wait on a frozen server: {res:?}");
    };
    assert!(
        took >= wait && took < wait + NEAR,
        "answered after {took:?}"
    );
    assert!(
        waited <= took && waited + Duration::from_millis(300) >= took,
        "waited {waited:?}, answered after {took:?}"
    );
    m.shutdown().await;
}

/// A fair waiter that found the lock held, then saw the server freeze, is answered by what
/// Redis says at its deadline (the last try), as any lock's waiter: `Unavailable` near the
/// deadline; its leave of the queue goes on in the actor (the queue is empty once the server
/// runs again). Breaks it: a fair waiter without the last try (it was `Ok(None)`, contention,
/// a response timeout after the deadline), and a leave not sent after the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_behind_a_holder_is_unavailable_near_its_deadline_when_the_server_freezes() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let m = LockManager::start(slow_to_give_up(&server)).await.unwrap();
    let holder = LockManager::start(config(&server)).await.unwrap();
    let wait = Duration::from_secs(1);
    let held = holder.fair_lock("fair:held").acquire().await.unwrap();
    let lock = m.fair_lock("fair:held");
    let channel = format!("redisson_lock__channel:{{fair:held}}:{}", lock.holder_id());
    let began = Instant::now();
    let waiting = tokio::spawn(async move { lock.try_acquire_for(wait).await });
    assert!(
        support::wait::subscribed(&mut raw, &channel, Duration::from_secs(5)).await,
        "the waiter queued and listens on its own channel"
    );
    server.pause(support::FROZEN).expect("pause the server");
    let res = waiting.await.unwrap();
    let took = began.elapsed();
    server.resume().expect("resume the server");
    let Err(LockError::Unavailable { waited, .. }) = res else {
        panic!("a frozen server after a busy answer: {res:?}");
    };
    assert!(took < wait + NEAR, "answered after {took:?}");
    assert!(waited <= took && waited >= wait, "waited {waited:?}");
    // The leave went on after the answer: the waiter's place is gone once Redis runs again.
    assert!(
        support::wait::eventually(Duration::from_secs(15), || {
            let queue: Vec<String> = redis::cmd("LRANGE")
                .arg("redisson_lock_queue:{fair:held}")
                .arg(0)
                .arg(-1)
                .query(&mut raw)
                .unwrap();
            queue.is_empty()
        })
        .await,
        "the waiter's place was left"
    );
    held.release().await.unwrap();
    m.shutdown().await;
    holder.shutdown().await;
}

/// A MultiLock's bounded wait ends near its deadline, as one lock's does, with the server
/// frozen: its first round's replies never come. Breaks it: a round whose members' attempts run
/// to their response timeout (3.0 s for a 2 s wait in the attack).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multilock_wait_on_a_frozen_server_ends_near_its_deadline() {
    let server = RedisServer::start();
    let m = LockManager::start(slow_to_give_up(&server)).await.unwrap();
    let wait = Duration::from_secs(1);

    server.pause(support::FROZEN).expect("pause the server");
    let multi = MultiLock::new(vec![m.lock("multi:a"), m.lock("multi:b")]);
    let began = Instant::now();
    let res = multi.try_acquire_for(wait).await;
    let took = began.elapsed();
    server.resume().expect("resume the server");
    assert!(
        matches!(&res, Err(LockError::Unavailable { name, .. }) if name.starts_with("multi:")),
        "a MultiLock on a frozen server: {:?}",
        res.map(|g| g.is_some())
    );
    assert!(
        took >= wait && took < wait + NEAR,
        "answered after {took:?}"
    );
    m.shutdown().await;
}

/// Two MultiLocks share a member that another manager holds; both wait on it, and the server
/// is stopped, or is stopped before they start. Each bounded wait ends near its deadline, not
/// after its members' waits one after another. Breaks it: a round of attempts after the
/// member's wait ended at the deadline (3.3 s for a 2 s wait), members' attempts that run past
/// the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multilocks_sharing_a_member_end_near_their_deadline_when_the_server_stops() {
    for stopped_first in [false, true] {
        let mut server = RedisServer::start();
        let m = LockManager::start(slow_to_give_up(&server)).await.unwrap();
        let holder = LockManager::start(config(&server)).await.unwrap();
        let held = holder.lock("shared").acquire().await.unwrap();
        if stopped_first {
            server.stop();
        }
        let wait = Duration::from_secs(2);
        let began = Instant::now();
        let waits: Vec<_> = ["multi:c", "multi:d"]
            .into_iter()
            .map(|other| {
                let multi = MultiLock::new(vec![m.lock("shared"), m.lock(other)]);
                tokio::spawn(async move {
                    let res = multi.try_acquire_for(wait).await.map(|g| g.is_some());
                    (res, began.elapsed())
                })
            })
            .collect();
        if !stopped_first {
            let mut raw = server.conn();
            assert!(
                support::wait::eventually(Duration::from_secs(5), || listening(&mut raw, "shared"))
                    .await,
                "the MultiLocks wait on the shared member"
            );
            server.stop();
        }
        for waiting in waits {
            let (res, took) = waiting.await.unwrap();
            assert!(
                matches!(&res, Err(LockError::Unavailable { .. })),
                "stopped first {stopped_first}: {res:?}"
            );
            assert!(
                took >= wait && took < wait + NEAR,
                "stopped first {stopped_first}: answered after {took:?}"
            );
        }
        drop(held);
        m.shutdown().await;
        holder.shutdown().await;
    }
}

/// An HTTP permit front with a short wait answers a frozen server `503` near its wait: setting
/// the semaphore's permits is part of the wait, not a response timeout before it. Breaks it:
/// setting the permits unbounded (3.0 s for a 200 ms wait in the attack).
#[cfg(feature = "tower")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_layer_answers_a_frozen_server_503_near_its_wait() {
    use axum::Router;
    use axum::routing::post;
    use lockman::tower::PermitLayer;

    let server = RedisServer::start();
    let m = LockManager::start(slow_to_give_up(&server)).await.unwrap();
    let wait = Duration::from_millis(200);
    let app = Router::new()
        .route("/limited/{name}", post(|| async { "done" }))
        .route_layer(PermitLayer::segment(m.clone(), 1, 1).wait(wait));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    // A name whose permits were set (the wait alone) and one seen first while frozen.
    let (got, _, body) = http_post(port, "/limited/set").await;
    assert_eq!(got, 200, "{body}");
    server.pause(support::FROZEN).expect("pause the server");
    for path in ["/limited/set", "/limited/new"] {
        let started = Instant::now();
        let (got, head, body) = http_post(port, path).await;
        let took = started.elapsed();
        assert_eq!(got, 503, "{path}: {body}");
        assert!(head.contains("retry-after:"), "{path}: {head}");
        assert!(took < wait + NEAR, "{path}: answered after {took:?}");
    }
    server.resume().expect("resume the server");
    m.shutdown().await;
}

/// The actix-web `RequestPermit`: the same bound as the tower layer's.
#[cfg(feature = "actix-web")]
#[actix_rt::test]
async fn a_request_permit_answers_a_frozen_server_503_near_its_wait() {
    use actix_web::{App, HttpResponse, test, web};
    use lockman::web::{RequestPermit, RequestPermits};

    async fn limited(_permit: RequestPermit) -> HttpResponse {
        HttpResponse::Ok().finish()
    }

    let server = RedisServer::start();
    let m = LockManager::start(slow_to_give_up(&server)).await.unwrap();
    let wait = Duration::from_millis(200);
    let app = test::init_service(
        App::new().service(
            web::scope("/limited")
                .app_data(RequestPermits::path(m.clone(), "name", 1).wait(wait))
                .route("/{name}", web::post().to(limited)),
        ),
    )
    .await;
    let answer = |path: &'static str| {
        let req = test::TestRequest::post().uri(path).to_request();
        test::call_service(&app, req)
    };
    assert_eq!(answer("/limited/set").await.status().as_u16(), 200);
    server.pause(support::FROZEN).expect("pause the server");
    for path in ["/limited/set", "/limited/new"] {
        let started = Instant::now();
        let res = answer(path).await;
        let took = started.elapsed();
        assert_eq!(res.status().as_u16(), 503, "{path}");
        assert!(res.headers().contains_key("retry-after"), "{path}");
        assert!(took < wait + NEAR, "{path}: answered after {took:?}");
    }
    server.resume().expect("resume the server");
    m.shutdown().await;
}

/// A permit semaphore's wait on a frozen server goes on until `unavailable_after`, as every
/// other wait does. (The break, found by a docs-only attack: its take's reply went missing, and
/// since the take might hold its permit ids in Redis the waiter was answered `Unavailable` a
/// third of the watchdog timeout into the outage, whatever its wait; it now goes on with new
/// ids.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_wait_on_a_frozen_server_lasts_until_unavailable_after() {
    let server = RedisServer::start();
    // A third of the watchdog timeout (1 s) well inside the outage bound (4 s).
    let bound = Duration::from_secs(4);
    let m = LockManager::start(config(&server).unavailable_after(bound))
        .await
        .unwrap();
    let permits = m.permit_semaphore("frozen-permits");
    assert!(permits.try_set_permits(1).await.unwrap());
    server.pause(support::FROZEN).expect("pause the server");
    let began = Instant::now();
    let res = permits.try_acquire_for(1, Duration::from_secs(20)).await;
    let took = began.elapsed();
    server.resume().expect("resume the server");
    assert!(
        matches!(res, Err(LockError::Unavailable { .. })),
        "{res:?} after {took:?}"
    );
    assert!(
        took + Duration::from_millis(300) >= bound,
        "gave up after {took:?}, before unavailable_after ({bound:?})"
    );
    assert!(took <= bound + LATE, "answered late: {took:?}");
    m.shutdown().await;
}
