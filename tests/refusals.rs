//! Refusals of the script call itself (the call goes straight to the connection): `NOPERM` (an
//! ACL user without EVALSHA, or without the lock's key), `OOM` (`maxmemory 1`, `noeviction`) and
//! `NOREPLICAS` (`min-replicas-to-write 1`, no replica), met by a release and by acquires.
//! The acquires' refusals on a free name are covered elsewhere for a first try (bad_input.rs,
//! deployments.rs, outage.rs); here each refusal meets:
//!
//! - a release of a lock held twice (reentrant, so the release writes `HINCRBY -1`, which
//!   `maxmemory` refuses too): its typed error, promptly; nothing applied in Redis (the count
//!   still 2); once the refusal is lifted the lock actor's resend applies it exactly once (the
//!   count 1), and the last release's message wakes a parked waiter of another manager long
//!   before the hold's 30 s PTTL;
//! - an unbounded `acquire()` of a free name (for the refusals that need a person, not a
//!   passing state): its typed error, promptly, never a hang; and a bounded wait: its typed
//!   error, never `Ok(None)` (nobody holds the name) — nothing written either way;
//! - (for the refusals that need a person) an unbounded `acquire()` parked behind another
//!   manager's hold and woken by its release: its attempt refused, the typed error at once.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockManager};
use redis::Commands;
use support::{RedisServer, wait};

/// Far above a loaded machine's round trips; far below a hang.
const PROMPT: Duration = Duration::from_secs(5);

/// Far below the 30 s PTTL that a waiter deaf to the release would retry at.
const WOKEN_WITHIN: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug)]
enum Refusal {
    /// The manager's user may no longer run EVALSHA.
    NoEvalsha,
    /// The manager's user may no longer touch the lock's keys.
    NoKey,
    /// `maxmemory 1` with `noeviction`: every denyoom write refused.
    OutOfMemory,
    /// `min-replicas-to-write 1` with no replica: every write refused.
    NoReplicas,
}

impl Refusal {
    fn set(self, raw: &mut redis::Connection, on: bool) {
        let mut cmd = redis::cmd(match self {
            Refusal::NoEvalsha | Refusal::NoKey => "ACL",
            Refusal::OutOfMemory | Refusal::NoReplicas => "CONFIG",
        });
        match (self, on) {
            (Refusal::NoEvalsha, _) => {
                cmd.arg("SETUSER")
                    .arg("app")
                    .arg(if on { "-evalsha" } else { "+evalsha" })
            }
            (Refusal::NoKey, true) => cmd.arg("SETUSER").arg("app").arg("resetkeys"),
            (Refusal::NoKey, false) => cmd.arg("SETUSER").arg("app").arg("~*"),
            (Refusal::OutOfMemory, _) => {
                cmd.arg("SET")
                    .arg("maxmemory")
                    .arg(if on { "1" } else { "0" })
            }
            (Refusal::NoReplicas, _) => {
                cmd.arg("SET")
                    .arg("min-replicas-to-write")
                    .arg(if on { "1" } else { "0" })
            }
        };
        let _: () = cmd.query(raw).expect("refusal set");
    }

    /// Whether `err` is this refusal's typed error.
    fn typed(self, err: &LockError) -> bool {
        match self {
            Refusal::NoEvalsha | Refusal::NoKey => {
                matches!(err, LockError::NoPermission { .. }) && !err.is_retryable()
            }
            Refusal::OutOfMemory => {
                matches!(err, LockError::OutOfMemory { .. }) && !err.is_retryable()
            }
            // A passing state: retryable, and named.
            Refusal::NoReplicas => err.is_retryable() && format!("{err:?}").contains("NOREPLICAS"),
        }
    }

    /// Needs a person (not retried by a wait): an unbounded `acquire()` must end with it.
    fn needs_a_person(self) -> bool {
        !matches!(self, Refusal::NoReplicas)
    }
}

/// The name a parked waiter of the refused manager waits on, held by the other manager.
const WAITED: &str = "refused-waited";

fn channel(name: &str) -> String {
    format!("redisson_lock__channel:{{{name}}}")
}

fn fields(raw: &mut redis::Connection, key: &str) -> HashMap<String, String> {
    raw.hgetall(key).expect("HGETALL")
}

async fn refused_under(refusal: Refusal) {
    let server = RedisServer::start_with(support::Options {
        args: ["--user", "app", "on", ">pw", "~*", "&*", "+@all"]
            .map(String::from)
            .to_vec(),
        ..Default::default()
    });
    let mut raw = server.conn();
    let app = format!("redis://app:pw@127.0.0.1:{}/0", server.port());
    let mgr = LockManager::start(Config::new(app)).await.expect("start");
    // The waiter's manager is the default user's: only `app` is refused an ACL permission.
    let other = LockManager::start(Config::new(server.url()))
        .await
        .expect("start");
    let name = "refused";

    // Held twice (a reentrant count of 2): a release is then an `HINCRBY -1`, a write that
    // `maxmemory` refuses too (a release to 0 is a `DEL`, which it lets through).
    let lock = mgr.lock(name);
    let (first, second) = (
        lock.acquire().await.expect("acquire"),
        lock.acquire().await.expect("again"),
    );
    let count = |n: &str| HashMap::from([(lock.holder_id().to_owned(), n.to_owned())]);
    assert_eq!(fields(&mut raw, name), count("2"));
    let waiter = other.lock(name);
    let waiting = tokio::spawn(async move { waiter.acquire().await });
    wait::subscribers(&mut raw, &channel(name), 1).await;
    // For a refusal that needs a person: a waiter of the refused manager, parked behind
    // another's hold, whose wake-up meets the refusal.
    let parked = if refusal.needs_a_person() {
        let theirs = other.lock(WAITED).acquire().await.expect("acquire");
        let lock = mgr.lock(WAITED);
        let task = tokio::spawn(async move { lock.acquire().await });
        wait::subscribers(&mut raw, &channel(WAITED), 1).await;
        Some((theirs, task))
    } else {
        None
    };
    wait::quiet(&mut raw).await;

    refusal.set(&mut raw, true);
    // The release: typed, prompt, nothing applied.
    let began = Instant::now();
    let err = tokio::time::timeout(PROMPT, first.release())
        .await
        .unwrap_or_else(|_| panic!("{refusal:?}: the release hangs"))
        .expect_err("refused");
    assert!(refusal.typed(&err), "{refusal:?}: release: {err:?}");
    assert!(
        began.elapsed() < PROMPT,
        "{refusal:?}: {:?}",
        began.elapsed()
    );
    assert_eq!(
        fields(&mut raw, name),
        count("2"),
        "{refusal:?}: nothing released"
    );
    let pttl: i64 = raw.pttl(name).expect("PTTL");
    assert!(pttl > 20_000, "{refusal:?}: the hold's PTTL {pttl}");
    assert!(!waiting.is_finished(), "{refusal:?}: the waiter waits");

    // Acquires of a free name: typed, prompt; never `Ok(None)`; nothing written.
    let free = "refused-free";
    let res = tokio::time::timeout(
        PROMPT,
        mgr.lock(free).try_acquire_for(Duration::from_millis(500)),
    )
    .await
    .unwrap_or_else(|_| panic!("{refusal:?}: the bounded wait hangs"));
    match res {
        Err(err) => assert!(refusal.typed(&err), "{refusal:?}: bounded: {err:?}"),
        Ok(got) => panic!(
            "{refusal:?}: bounded wait on a free name: Ok({:?})",
            got.map(|g| g.holder_id().to_owned())
        ),
    }
    if refusal.needs_a_person() {
        let res = tokio::time::timeout(PROMPT, mgr.lock(free).acquire())
            .await
            .unwrap_or_else(|_| panic!("{refusal:?}: an unbounded acquire hangs"));
        let err = res.map(drop).expect_err("refused");
        assert!(refusal.typed(&err), "{refusal:?}: unbounded: {err:?}");
    }
    if let Some((theirs, task)) = parked {
        // The other manager's release (a DEL, which `maxmemory` lets through) wakes it; its
        // attempt is refused: that is its answer, at once, not a wait for good.
        theirs.release().await.expect("release");
        let res = tokio::time::timeout(PROMPT, task)
            .await
            .unwrap_or_else(|_| panic!("{refusal:?}: the woken waiter hangs"))
            .expect("no panic");
        let err = res.map(drop).expect_err("refused");
        assert!(refusal.typed(&err), "{refusal:?}: woken waiter: {err:?}");
        let exists: bool = raw.exists(WAITED).expect("EXISTS");
        assert!(!exists, "{refusal:?}: nothing written for the waited name");
    }
    let exists: bool = raw.exists(free).expect("EXISTS");
    assert!(!exists, "{refusal:?}: nothing written for the free name");
    assert_eq!(
        fields(&mut raw, name),
        count("2"),
        "{refusal:?}: still held twice"
    );

    // Lifted: the lock actor's resend applies the refused release, once.
    refusal.set(&mut raw, false);
    wait::until(&format!("{refusal:?}: the refused release resent"), || {
        fields(&mut raw, name) == count("1")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        fields(&mut raw, name),
        count("1"),
        "{refusal:?}: applied once"
    );
    assert!(!waiting.is_finished(), "{refusal:?}: still held once");
    // The last release wakes the parked waiter by its message.
    let freed = Instant::now();
    second.release().await.expect("release");
    let got = tokio::time::timeout(Duration::from_secs(40), waiting)
        .await
        .expect("answered by the PTTL's retry at the latest")
        .expect("no panic")
        .expect("the waiter acquired");
    let took = freed.elapsed();
    assert!(
        took < WOKEN_WITHIN,
        "{refusal:?}: the waiter had the lock {took:?} after the release"
    );
    assert_eq!(
        fields(&mut raw, name),
        HashMap::from([(got.holder_id().to_owned(), "1".to_owned())]),
        "{refusal:?}: taken by the waiter"
    );
    got.release().await.expect("release");
    // Only the managers' client records are left.
    let keys: Vec<String> = raw.keys("*").expect("KEYS");
    let left: Vec<_> = (keys.iter())
        .filter(|k| !k.starts_with("lockman_client:{lockman}"))
        .collect();
    assert!(left.is_empty(), "{refusal:?}: left {left:?}");
    mgr.shutdown().await;
    other.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_evalsha_is_refused_typed_and_its_release_resent_once_allowed() {
    refused_under(Refusal::NoEvalsha).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_key_is_refused_typed_and_its_release_resent_once_allowed() {
    refused_under(Refusal::NoKey).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_is_refused_typed_and_the_release_resent_once_lifted() {
    refused_under(Refusal::OutOfMemory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noreplicas_is_refused_typed_and_the_release_resent_once_lifted() {
    refused_under(Refusal::NoReplicas).await;
}
