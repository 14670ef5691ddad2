//! One client cut off from Redis while the others are not: the client's every connection runs
//! through a TCP proxy (the kit's `Link`) that the test cuts, while a second manager reaches the same
//! server directly. A cut is a black hole (connections stay open, nothing gets through, new
//! connections are accepted and hang); a heal closes the old connections, as a partition's
//! time-outs do. Variants: only the replies lost (requests still run), old flows that stay
//! black-holed after the heal, and only the pub/sub flow gone silent. What is tried here:
//!
//! - `valid_until` and `scope` (README, "Deadlines a hold can obey") of a lock, a permit and a
//!   RedLock: the cut-off holder's work stops, and its validity passes, before another client
//!   gets in; "Lost locks are reported" while the holder is still cut off;
//! - "Sent again" and cancel safety: an acquire or a release that ran but whose reply was lost
//!   is counted once, given back when its caller left, never takes a later hold;
//! - "Recovery": waiters parked through a cut are served once it heals; a client whose old
//!   connections stay black-holed, or whose pub/sub flow goes silent, recovers (two defects);
//! - `shutdown` while cut off; bounded waits of the synchronizers while replies are lost (they
//!   end about when their wait does).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockman::testing::Link;
use lockman::{Config, LockError, LockManager};
use redis::Commands;
use support::{RedisServer, wait::eventually};

/// A short watchdog, so a hold outlives a cut by a couple of seconds only; scope's margin is a
/// tenth of it (200 ms).
const WATCHDOG: Duration = Duration::from_millis(2000);

/// The kit's link in front of one redis-server (`lockman::testing::Link`: a TCP proxy on a
/// thread and runtime of its own, so that nothing the test's runtime does slows it), under the
/// names this file's tests use.
struct Proxy(Link);

impl Proxy {
    fn start(upstream: u16) -> Self {
        Self(Link::start(([127, 0, 0, 1], upstream).into()).expect("the proxy listens"))
    }

    fn url(&self) -> String {
        self.0.url()
    }

    /// Nothing gets through from now on, either way; connections stay open.
    fn cut(&self) {
        self.0.cut();
    }

    /// Requests still reach the server and run there, but no reply comes back.
    fn cut_replies(&self) {
        self.0.drop_replies();
    }

    /// New connections flow again; those from before stay open and drop everything for good.
    fn heal_new_only(&self) {
        self.0.heal_new_only();
    }

    /// Only the pub/sub connections made so far go silent, for good.
    fn forget_pubsub_flows(&self) {
        self.0.forget_pubsub();
    }

    /// Traffic flows again on new connections; those from before are closed.
    fn heal(&self) {
        self.0.heal();
    }
}

/// The connect timeout, which also bounds a manager's start (plus a second): generous, for
/// a start on a loaded machine (at 500 ms, starts failed at 1.5 s with both cores busy).
/// What a cut costs is bounded by the response timeout; reconnects wait for the heal.
const START_LIMIT: Duration = Duration::from_secs(3);

fn config(url: String) -> Config {
    Config::new(url)
        .watchdog_timeout(WATCHDOG)
        .response_timeout(Duration::from_millis(300))
        .connect_timeout(START_LIMIT)
}

/// Work that counts its steps (one every 5 ms) until it is dropped.
async fn count_steps(steps: Arc<AtomicU64>) {
    loop {
        steps.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits (bounded) until the hold's validity has moved on from `first`: a renewal was confirmed.
async fn renewed_once(valid_until: impl Fn() -> Instant) {
    let first = valid_until();
    assert!(
        eventually(WATCHDOG * 2, || valid_until() > first).await,
        "the hold was never renewed before the cut"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_holder_stops_and_is_reported_lost_and_never_takes_the_next_hold() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let proxy = Proxy::start(server.port());
    let cut_off = LockManager::start(config(proxy.url())).await.unwrap();
    let direct = LockManager::start(config(server.url())).await.unwrap();

    let lock = cut_off.lock("partitioned");
    let guard = lock.acquire().await.unwrap();
    renewed_once(|| guard.valid_until()).await;

    let steps = Arc::new(AtomicU64::new(0));
    let cut_at = Instant::now();
    proxy.cut();
    let other = direct.lock("partitioned");
    let (work, got_in) = tokio::join!(
        async {
            let stopped = guard.scope(count_steps(steps.clone())).await;
            (stopped, Instant::now())
        },
        async {
            let g = tokio::time::timeout(WATCHDOG * 4, other.acquire())
                .await
                .expect("the other client gets in once the cut-off hold expires")
                .unwrap();
            (g, Instant::now())
        }
    );
    let (stopped, stopped_at) = work;
    let (other_guard, other_in) = got_in;
    eprintln!(
        "cut-off work stopped {:?} and its validity ended {:?} before the other got in",
        other_in.saturating_duration_since(stopped_at),
        other_in.saturating_duration_since(guard.valid_until()),
    );
    assert!(
        matches!(
            stopped,
            Err(LockError::HoldExpiring { .. } | LockError::HoldLost { .. })
        ),
        "scope ended with {stopped:?}"
    );
    assert!(
        stopped_at < other_in,
        "the cut-off holder's work ran until {:?} after the other client got in",
        stopped_at - other_in
    );
    assert!(
        guard.valid_until() < other_in,
        "valid_until is {:?} past the other client's grant",
        guard.valid_until() - other_in
    );
    // No step after the scope stopped: the work really was dropped.
    let after = steps.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(steps.load(Ordering::SeqCst), after, "the work still runs");

    // Reported lost while still cut off: no renewal for a whole watchdog timeout.
    assert!(
        tokio::time::timeout(WATCHDOG * 2, guard.lost())
            .await
            .is_ok(),
        "the cut-off guard was not reported lost {:?} after the cut",
        cut_at.elapsed()
    );

    // Its release, sent while cut off and resent after the heal, says the hold was gone and
    // leaves the other client's hold exactly as it was.
    let released = tokio::spawn(async move { guard.release().await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    proxy.heal();
    let released = tokio::time::timeout(WATCHDOG * 3, released)
        .await
        .expect("the release is answered after the heal")
        .unwrap();
    assert!(
        matches!(released, Err(LockError::NotHeld { .. })),
        "release of the lost hold: {released:?}"
    );
    let fields: std::collections::HashMap<String, String> = raw.hgetall("partitioned").unwrap();
    assert_eq!(
        fields,
        std::collections::HashMap::from([(other.holder_id(), "1".to_owned())]),
        "the later hold was touched"
    );

    // Healed: the cut-off client locks again, woken by the other's release.
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.try_acquire_for(WATCHDOG * 3).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    other_guard.release().await.unwrap();
    let again = waiter.await.unwrap().unwrap();
    let again = again.expect("the healed client locks again");
    assert!(!again.is_lost());
    again.release().await.unwrap();
    assert!(!raw.exists::<_, bool>("partitioned").unwrap());
    cut_off.shutdown().await;
    direct.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_permit_stops_its_work_and_is_reported_lost_before_its_permit_is_taken_again() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let cut_off = LockManager::start(config(proxy.url())).await.unwrap();
    let direct = LockManager::start(config(server.url())).await.unwrap();

    let mine = cut_off.permit_semaphore("partner");
    assert!(mine.try_set_permits(1).await.unwrap());
    let permit = mine.acquire(1).await.unwrap();
    renewed_once(|| {
        permit
            .valid_until()
            .expect("a renewed permit has a validity")
    })
    .await;

    let steps = Arc::new(AtomicU64::new(0));
    let cut_at = Instant::now();
    proxy.cut();
    let theirs = direct.permit_semaphore("partner");
    let (work, got_in) = tokio::join!(
        async {
            let stopped = permit.scope(count_steps(steps.clone())).await;
            (stopped, Instant::now())
        },
        async {
            let g = tokio::time::timeout(WATCHDOG * 4, theirs.acquire(1))
                .await
                .expect("the other client gets the permit once the cut-off one expires")
                .unwrap();
            (g, Instant::now())
        }
    );
    let (stopped, stopped_at) = work;
    let (their_permit, they_got_in) = got_in;
    eprintln!(
        "cut-off permit's work stopped {:?} before the other got the permit",
        they_got_in.saturating_duration_since(stopped_at),
    );
    assert!(
        matches!(
            stopped,
            Err(LockError::HoldExpiring { .. } | LockError::HoldLost { .. })
        ),
        "scope ended with {stopped:?}"
    );
    assert!(
        stopped_at < they_got_in,
        "the cut-off holder's work ran until {:?} after the other client got its permit",
        stopped_at - they_got_in
    );
    let valid_until = permit.valid_until().unwrap();
    assert!(
        valid_until < they_got_in,
        "valid_until is {:?} past the other client's grant",
        valid_until - they_got_in
    );
    // Reported lost while still cut off, as a lock's guard is.
    assert!(
        tokio::time::timeout(WATCHDOG * 2, permit.lost())
            .await
            .is_ok(),
        "the cut-off permit was not reported lost {:?} after the cut",
        cut_at.elapsed()
    );
    proxy.heal();
    let released = tokio::time::timeout(WATCHDOG * 3, permit.release())
        .await
        .expect("the release is answered after the heal");
    assert!(
        matches!(released, Err(LockError::NotHeld { .. })),
        "release of the lost permit: {released:?}"
    );
    assert_eq!(theirs.available().await.unwrap(), 0, "a permit too many");
    their_permit.release().await.unwrap();
    assert_eq!(theirs.available().await.unwrap(), 1);
    cut_off.shutdown().await;
    direct.shutdown().await;
}

/// A manager with the default 30 s watchdog: a hold left behind would stay 30 s, which tells it
/// apart from one given back.
fn slow_watchdog(url: String) -> Config {
    Config::new(url)
        .watchdog_timeout(Duration::from_secs(30))
        .response_timeout(Duration::from_millis(300))
        .connect_timeout(START_LIMIT)
}

/// The manager that reaches the server directly, never cut: the 30 s watchdog and the default
/// response timeout (not the cut-off client's 300 ms, which a loaded machine can exceed on a
/// single attempt: a `count_down` failed so once).
fn straight(url: String) -> Config {
    Config::new(url).watchdog_timeout(Duration::from_secs(30))
}

/// README, "Cancel safety": "a grant that arrives after the caller left is released"; and
/// docs/protocol.md, "Sent again". Here the acquire runs in Redis and takes the lock, but its
/// reply (and every resend's) is lost; the caller's wait runs out and it leaves. Once replies
/// flow again the hold must be given back at once, not left to a 30 s watchdog lease, and
/// counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_that_ran_but_whose_reply_was_lost_is_given_back_after_the_caller_left() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let proxy = Proxy::start(server.port());
    let cut_off = LockManager::start(slow_watchdog(proxy.url()))
        .await
        .unwrap();
    let direct = LockManager::start(straight(server.url())).await.unwrap();
    let lock = cut_off.lock("lost-reply");
    support::commands::load_scripts(&lock).await;

    proxy.cut_replies();
    let gave_up = lock.try_acquire_for(Duration::from_millis(400)).await;
    // It ran: the hold is in Redis, counted once, though the caller never heard of it.
    let count: Option<String> = raw.hget("lost-reply", lock.holder_id()).unwrap();
    assert_eq!(count.as_deref(), Some("1"), "the acquire did not run once");
    assert!(
        !matches!(gave_up, Ok(Some(_))),
        "a grant came through a cut: {gave_up:?}"
    );
    let other = direct.lock("lost-reply");
    let waiter = tokio::spawn(async move {
        let asked = Instant::now();
        let got = other.try_acquire_for(Duration::from_secs(20)).await;
        (got, asked.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let healed = Instant::now();
    proxy.heal();
    let (got, waited) = waiter.await.unwrap();
    let got = got.unwrap().expect("the other client gets in");
    eprintln!(
        "the other client got in {:?} after the heal",
        healed.elapsed()
    );
    assert!(
        healed.elapsed() < Duration::from_secs(5),
        "the caller-less hold was not given back: the other client waited {waited:?}"
    );
    let fields: std::collections::HashMap<String, String> = raw.hgetall("lost-reply").unwrap();
    assert_eq!(
        fields,
        std::collections::HashMap::from([(got.holder_id().to_owned(), "1".to_owned())]),
    );
    got.release().await.unwrap();
    cut_off.shutdown().await;
    direct.shutdown().await;
}

/// The same, for the non-reentrant kinds, whose holder asks again with the same handle while
/// cut off: that request waits behind the lost acquire's resends (docs/protocol.md, "Sent
/// again": one request of a holder at a time), and once replies flow the grant nobody took is
/// given back first. The holder is never told `AlreadyHeld` (the grant never reached it) and
/// gets a hold of its own, counted once, which its guard releases. A second request sent ahead
/// would find the count the first left, take that hold for its own, and lose it to the
/// give-back (its guard's release says `NotHeld`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_reentrant_acquire_whose_reply_was_lost_never_refuses_its_holders_next_acquire() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let proxy = Proxy::start(server.port());
    let cut_off = LockManager::start(slow_watchdog(proxy.url()))
        .await
        .unwrap();
    for (kind, lock) in [
        ("non-reentrant", cut_off.non_reentrant_lock("nr-lost")),
        (
            "non-reentrant fair",
            cut_off.non_reentrant_fair_lock("nr-lost").into(),
        ),
    ] {
        support::commands::load_scripts(&lock).await;
        proxy.cut_replies();
        let gave_up = lock.try_acquire_for(Duration::from_millis(400)).await;
        let count: Option<String> = raw.hget("nr-lost", lock.holder_id()).unwrap();
        assert_eq!(
            count.as_deref(),
            Some("1"),
            "{kind}: the acquire did not run once"
        );
        assert!(
            !matches!(gave_up, Ok(Some(_))),
            "{kind}: a grant came through a cut: {gave_up:?}"
        );
        let again = {
            let lock = lock.clone();
            tokio::spawn(async move { lock.try_acquire_for(Duration::from_secs(20)).await })
        };
        // The heal may come before or after the second request reaches the name's actor; the
        // outcome must be the same.
        tokio::time::sleep(Duration::from_millis(200)).await;
        proxy.heal();
        let guard = again
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{kind}: {e:?}"))
            .unwrap_or_else(|| panic!("{kind}: not free once the grant nobody took is given back"));
        let fields: std::collections::HashMap<String, String> = raw.hgetall("nr-lost").unwrap();
        assert_eq!(
            fields,
            std::collections::HashMap::from([(lock.holder_id(), "1".to_owned())]),
            "{kind}"
        );
        guard.release().await.unwrap();
        let left: Vec<String> = raw.keys("*nr-lost*").unwrap();
        assert!(left.is_empty(), "{kind}: left in Redis: {left:?}");
    }
    cut_off.shutdown().await;
}

/// A release that ran in Redis but whose reply was lost: the hold was released by its own
/// release, exactly once, and never renewed again. Its guard must not be told the lock was
/// lost (README: `NotHeld` "when the lock was lost meanwhile"), and a waiter elsewhere gets in
/// at once (the release published).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_ran_but_whose_reply_was_lost_is_not_reported_as_a_lost_hold() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let proxy = Proxy::start(server.port());
    let cut_off = LockManager::start(slow_watchdog(proxy.url()))
        .await
        .unwrap();
    let direct = LockManager::start(straight(server.url())).await.unwrap();
    let lock = cut_off.lock("lost-release");
    let guard = lock.acquire().await.unwrap();

    let other = direct.lock("lost-release");
    let waiter = tokio::spawn(async move {
        let asked = Instant::now();
        (other.try_acquire_for(Duration::from_secs(20)).await, asked)
    });
    // The waiter is parked on the channel.
    let mut probe = server.conn();
    assert!(
        support::wait::subscribed(
            &mut probe,
            "redisson_lock__channel:{lost-release}",
            Duration::from_secs(5)
        )
        .await
    );
    proxy.cut_replies();
    let released_at = Instant::now();
    let released = tokio::spawn(async move { guard.release().await });
    let (got, _) = waiter.await.unwrap();
    let got = got
        .unwrap()
        .expect("the waiter gets in once the release ran");
    eprintln!(
        "the waiter got in {:?} after the release",
        released_at.elapsed()
    );
    assert!(released_at.elapsed() < Duration::from_secs(5));
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.heal();
    let released = tokio::time::timeout(Duration::from_secs(20), released)
        .await
        .expect("the release is answered")
        .unwrap();
    eprintln!("release() returned {released:?}");
    assert!(
        !matches!(released, Err(LockError::NotHeld { .. })),
        "a release that released the hold said it was not held: {released:?}"
    );
    let fields: std::collections::HashMap<String, String> = raw.hgetall("lost-release").unwrap();
    assert_eq!(
        fields,
        std::collections::HashMap::from([(got.holder_id().to_owned(), "1".to_owned())]),
    );
    got.release().await.unwrap();
    cut_off.shutdown().await;
    direct.shutdown().await;
}

/// RELIABILITY.md / README: a RedLock's `valid_until` is "the instant fewer than its quorum of
/// members would still be valid", and its scope stops "as soon as the composition is known
/// lost (fewer than its quorum of members held) or its `valid_until` comes within a margin".
/// Here the holder is cut off from two of its three servers (the third still renews), while a
/// second RedLock client reaches all three directly: the holder's work must stop, and its
/// validity pass, before the other client can have a majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_holder_cut_off_from_a_majority_stops_before_another_gets_a_majority() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let proxies: Vec<Proxy> = servers.iter().map(|s| Proxy::start(s.port())).collect();
    let mut mine = Vec::new();
    let mut theirs = Vec::new();
    for (server, proxy) in servers.iter().zip(&proxies) {
        mine.push(LockManager::start(config(proxy.url())).await.unwrap());
        theirs.push(LockManager::start(config(server.url())).await.unwrap());
    }
    let red = |managers: &[LockManager]| {
        lockman::RedLock::new(managers.iter().map(|m| m.lock("red:cut")).collect())
    };
    let guard = red(&mine).acquire().await.unwrap();
    renewed_once(|| guard.valid_until()).await;

    let steps = Arc::new(AtomicU64::new(0));
    proxies[0].cut();
    proxies[1].cut();
    let other = red(&theirs);
    let (work, got_in) = tokio::join!(
        async {
            let stopped = guard.scope(count_steps(steps.clone())).await;
            (stopped, Instant::now())
        },
        async {
            let g = tokio::time::timeout(WATCHDOG * 4, other.acquire())
                .await
                .expect("the other client gets a majority once the cut-off members expire")
                .unwrap();
            (g, Instant::now())
        }
    );
    let (stopped, stopped_at) = work;
    let (their_guard, they_got_in) = got_in;
    eprintln!(
        "cut-off RedLock work stopped {:?} and its validity ended {:?} before the other got a majority",
        they_got_in.saturating_duration_since(stopped_at),
        they_got_in.saturating_duration_since(guard.valid_until()),
    );
    assert!(
        matches!(
            stopped,
            Err(LockError::HoldExpiring { .. } | LockError::HoldLost { .. })
        ),
        "scope ended with {stopped:?}"
    );
    assert!(
        stopped_at < they_got_in,
        "the cut-off RedLock's work ran until {:?} after the other got a majority",
        stopped_at - they_got_in
    );
    assert!(
        guard.valid_until() < they_got_in,
        "valid_until is {:?} past the other client's majority",
        guard.valid_until() - they_got_in
    );
    assert!(
        tokio::time::timeout(WATCHDOG * 2, guard.lost())
            .await
            .is_ok(),
        "the cut-off RedLock was not reported lost"
    );
    // Once the losses are known the validity stays where it ended: it read "now" then, past
    // the other client's majority.
    assert!(
        guard.valid_until() < they_got_in,
        "once lost, valid_until is {:?} past the other client's majority",
        guard.valid_until().saturating_duration_since(they_got_in)
    );
    proxies[0].heal();
    proxies[1].heal();
    let _ = tokio::time::timeout(WATCHDOG * 3, guard.release())
        .await
        .expect("the release is answered after the heal");
    // The other client's members are untouched; the third server's member, which the cut-off
    // holder kept and released, is free or the other client's.
    for (i, server) in servers.iter().enumerate() {
        let mut raw = server.conn();
        let fields: std::collections::HashMap<String, String> = raw.hgetall("red:cut").unwrap();
        assert!(
            fields
                .keys()
                .all(|h| !h.starts_with(&mine[i].client_id().to_string())),
            "server {i}: the cut-off client still holds {fields:?}"
        );
    }
    their_guard.release().await.unwrap();
    for m in mine.iter().chain(&theirs) {
        m.shutdown().await;
    }
}

/// `LockManager::shutdown` while cut off from Redis: "Stops renewals, releases every lock …,
/// fails its waiters with `LockError::Shutdown` … Later calls fail with `Shutdown`", and
/// RELIABILITY.md: its release "does not retry": holds stay until their TTL, "at most the
/// watchdog timeout", their guards told of the shutdown. So a shutdown must end in bounded time
/// even with every connection a black hole, and nothing renews the holds afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_while_cut_off_ends_promptly_and_leaves_nothing_renewed() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let proxy = Proxy::start(server.port());
    let cut_off = LockManager::start(config(proxy.url())).await.unwrap();
    let direct = LockManager::start(config(server.url())).await.unwrap();
    let held = cut_off.lock("down:held").acquire().await.unwrap();
    let permits = cut_off.permit_semaphore("down:permits");
    assert!(permits.try_set_permits(1).await.unwrap());
    let permit = permits.acquire(1).await.unwrap();
    let taken = direct.lock("down:waited").acquire().await.unwrap();
    let waiter = {
        let lock = cut_off.lock("down:waited");
        tokio::spawn(async move { lock.acquire().await })
    };
    let mut probe = server.conn();
    assert!(
        support::wait::subscribed(
            &mut probe,
            "redisson_lock__channel:{down:waited}",
            Duration::from_secs(5)
        )
        .await
    );
    renewed_once(|| held.valid_until()).await;

    proxy.cut();
    let cut_at = Instant::now();
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), cut_off.shutdown())
        .await
        .expect("shutdown did not end within 10 s while cut off");
    eprintln!("shutdown took {:?} while cut off", started.elapsed());
    let waited = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter was not failed by the shutdown")
        .unwrap();
    assert!(matches!(waited, Err(LockError::Shutdown)), "{waited:?}");
    assert!(held.is_lost(), "the hold's guard was not told");
    assert!(permit.is_lost(), "the permit's guard was not told");
    assert!(matches!(
        cut_off.lock("down:held").try_acquire().await,
        Err(LockError::Shutdown)
    ));
    // Nothing renews the hold or the permit: the other client gets both within the watchdog
    // timeout of the cut (plus slack), though the cut-off client is healed meanwhile.
    proxy.heal();
    let mine = direct
        .lock("down:held")
        .try_acquire_for(WATCHDOG * 2)
        .await
        .unwrap()
        .expect("the shut-down client's hold was renewed");
    let theirs = direct
        .permit_semaphore("down:permits")
        .try_acquire_for(1, WATCHDOG * 2)
        .await
        .unwrap()
        .expect("the shut-down client's permit was renewed");
    assert!(
        cut_at.elapsed() < WATCHDOG * 2,
        "got in {:?} after the cut",
        cut_at.elapsed()
    );
    drop((held, permit));
    mine.release().await.unwrap();
    theirs.release().await.unwrap();
    taken.release().await.unwrap();
    let left: Vec<String> = raw.keys("down:*").unwrap();
    assert_eq!(left, vec!["down:permits".to_owned()], "left behind");
    direct.shutdown().await;
}

/// README, "Recovery": the pub/sub connection "reconnects with backoff, resubscribes and makes
/// every waiter retry"; docs/protocol.md, "Messages": "every waiter also tries again … after
/// every reconnection of its subscription"; a latch wait reads the count again "after a
/// reconnection". Here a lock waiter, a permit waiter and a latch waiter of one client are
/// parked when it is cut off; meanwhile the lock and the permit are released and the latch
/// opens, and every message of that is lost to it. Once the cut heals each must be served
/// within a couple of seconds, not at the holder's 30 s TTL or the latch wait's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_parked_through_a_cut_are_served_promptly_once_it_heals() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let cut_off = LockManager::start(slow_watchdog(proxy.url()))
        .await
        .unwrap();
    let direct = LockManager::start(straight(server.url())).await.unwrap();

    let held = direct.lock("heal:lock").acquire().await.unwrap();
    let sem = direct.permit_semaphore("heal:permits");
    assert!(sem.try_set_permits(1).await.unwrap());
    let permit = sem.acquire(1).await.unwrap();
    let latch = direct.count_down_latch("heal:latch");
    assert!(latch.try_set_count(1).await.unwrap());

    let lock_waiter = tokio::spawn({
        let lock = cut_off.lock("heal:lock");
        async move { lock.try_acquire_for(Duration::from_secs(25)).await }
    });
    let permit_waiter = tokio::spawn({
        let sem = cut_off.permit_semaphore("heal:permits");
        async move { sem.try_acquire_for(1, Duration::from_secs(25)).await }
    });
    let latch_waiter = tokio::spawn({
        let latch = cut_off.count_down_latch("heal:latch");
        async move { latch.wait_for(Duration::from_secs(25)).await }
    });
    let mut probe = server.conn();
    for channel in [
        "redisson_lock__channel:{heal:lock}",
        "redisson_sc:{heal:permits}",
        "redisson_countdownlatch__channel__{heal:latch}",
    ] {
        assert!(
            support::wait::subscribed(&mut probe, channel, Duration::from_secs(5)).await,
            "{channel}: nobody waits"
        );
    }
    // Each waiter has made its attempts (the one after its subscription too) and is parked:
    // no script for a while.
    support::wait::quiet(&mut probe).await;

    proxy.cut();
    held.release().await.unwrap();
    permit.release().await.unwrap();
    assert_eq!(latch.count_down().await.unwrap(), 0);
    // Long enough that the cut-off client's connections time out and it tries to reconnect
    // (into the black hole), short of any 30 s fallback.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!lock_waiter.is_finished() && !permit_waiter.is_finished());
    let healed = Instant::now();
    proxy.heal();

    let limit = Duration::from_secs(5);
    let got_lock = tokio::time::timeout(limit, lock_waiter)
        .await
        .expect("the lock waiter was not served after the heal")
        .unwrap()
        .unwrap()
        .expect("the lock waiter gave up");
    eprintln!("lock waiter served {:?} after the heal", healed.elapsed());
    let got_permit = tokio::time::timeout(limit, permit_waiter)
        .await
        .expect("the permit waiter was not served after the heal")
        .unwrap()
        .unwrap()
        .expect("the permit waiter gave up");
    eprintln!("permit waiter served {:?} after the heal", healed.elapsed());
    let opened = tokio::time::timeout(limit, latch_waiter)
        .await
        .expect("the latch waiter was not served after the heal")
        .unwrap()
        .unwrap();
    eprintln!("latch waiter served {:?} after the heal", healed.elapsed());
    assert!(opened, "the latch wait ended closed");
    got_lock.release().await.unwrap();
    got_permit.release().await.unwrap();
    cut_off.shutdown().await;
    direct.shutdown().await;
}

/// src/lib.rs, "When Redis fails": "the command connections reconnect by themselves", and the
/// pub/sub connection is restarted when its stream ends; README, "Recovery": calls fail with a
/// retryable error "while Redis is away". Here Redis is away for 1.5 s, then reachable again on
/// any new connection, but the client's old connections are never told they are dead: their
/// flows stay black-holed (a NAT or firewall that dropped its state during the partition, as
/// cloud load balancers and conntrack do, without a reset). A client that only ever reuses its
/// connections never recovers: every call times out, and a waiter is never woken by a message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_old_connections_stay_black_holed_recovers_on_new_ones() {
    const RECOVERY_LIMIT_S: u64 = 10;
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let cut_off = LockManager::start(slow_watchdog(proxy.url()))
        .await
        .unwrap();
    let direct = LockManager::start(straight(server.url())).await.unwrap();
    // Both connections in use: a command round trip, and a waiter's subscription.
    cut_off
        .lock("stale:warm")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let held = direct.lock("stale:lock").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let lock = cut_off.lock("stale:lock");
        async move { lock.try_acquire_for(Duration::from_secs(25)).await }
    });
    let mut probe = server.conn();
    assert!(
        support::wait::subscribed(
            &mut probe,
            "redisson_lock__channel:{stale:lock}",
            Duration::from_secs(5)
        )
        .await
    );
    // Its post-subscribe attempt has run and it is parked: no script for a while.
    support::wait::quiet(&mut probe).await;

    proxy.cut();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let healed = Instant::now();
    proxy.heal_new_only();
    held.release().await.unwrap();

    // Redis is reachable through the proxy again: a manager started now works at once.
    let fresh = LockManager::start(slow_watchdog(proxy.url()))
        .await
        .unwrap();
    fresh
        .lock("stale:fresh")
        .try_acquire()
        .await
        .unwrap()
        .expect("a new client locks through the healed proxy")
        .release()
        .await
        .unwrap();
    fresh.shutdown().await;

    // A new call on a name the client never used: it needs only a working command connection.
    let mut last = None;
    let recovered = loop {
        match cut_off.lock("stale:new").try_acquire().await {
            Ok(Some(guard)) => {
                guard.release().await.unwrap();
                break true;
            }
            other => last = Some(format!("{other:?}")),
        }
        if healed.elapsed() > Duration::from_secs(RECOVERY_LIMIT_S) {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!(
        "calls after the heal: recovered {recovered} after {:?}, last {last:?}",
        healed.elapsed()
    );
    assert!(
        recovered,
        "no call succeeded within {RECOVERY_LIMIT_S} s of Redis being reachable again: {last:?}"
    );
    let served = tokio::time::timeout(Duration::from_secs(10), waiter).await;
    assert!(
        matches!(&served, Ok(Ok(Ok(Some(_))))),
        "the parked waiter was not served within 10 s of the heal and the release: {served:?}"
    );
    cut_off.shutdown().await;
    direct.shutdown().await;
}

/// README, "Waiting without polling": a waiter "retries when the holder releases or its TTL
/// runs out"; `try_acquire_for` "gives up after about the wait" (tests/waiting.rs). Here only
/// the client's pub/sub connection goes silent for good (a NAT or firewall forgetting the idle
/// flow without a reset) while its command connection works. A waiter parked before the flow
/// went silent, and one that comes after, must each get a lock released under it without
/// waiting for the holder's whole 30 s TTL; a bounded wait must still end about on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_pubsub_connection_neither_hangs_bounded_waits_nor_loses_wake_ups() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let cut_off = LockManager::start(slow_watchdog(proxy.url()))
        .await
        .unwrap();
    let direct = LockManager::start(straight(server.url())).await.unwrap();
    // The pub/sub connection is up and used: one wake-up by message goes through.
    let held = direct.lock("quiet:warm").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let lock = cut_off.lock("quiet:warm");
        async move { lock.try_acquire_for(Duration::from_secs(10)).await }
    });
    let mut probe = server.conn();
    assert!(
        support::wait::subscribed(
            &mut probe,
            "redisson_lock__channel:{quiet:warm}",
            Duration::from_secs(5)
        )
        .await
    );
    // Its post-subscribe attempt has run and it is parked: no script for a while.
    support::wait::quiet(&mut probe).await;
    held.release().await.unwrap();
    let warm = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("woken by the message")
        .unwrap()
        .unwrap()
        .expect("got the lock");
    warm.release().await.unwrap();
    // A waiter parked before the flow goes silent: nothing it does afterwards touches the
    // pub/sub connection, so only a check of the connection itself can notice the silence.
    let parked_lock = direct.lock("quiet:parked").acquire().await.unwrap();
    let parked = tokio::spawn({
        let lock = cut_off.lock("quiet:parked");
        async move { lock.try_acquire_for(Duration::from_secs(25)).await }
    });
    assert!(
        support::wait::subscribed(
            &mut probe,
            "redisson_lock__channel:{quiet:parked}",
            Duration::from_secs(5)
        )
        .await
    );
    // Its post-subscribe attempt has run and it is parked: no script for a while.
    support::wait::quiet(&mut probe).await;

    proxy.forget_pubsub_flows();
    // Commands still work.
    cut_off
        .lock("quiet:free")
        .try_acquire()
        .await
        .unwrap()
        .expect("a free lock, by command")
        .release()
        .await
        .unwrap();

    // The parked waiter gets the lock released under it within a few seconds (the pub/sub
    // connection is pinged every 3 s and given 1 s to answer), not at the holder's 30 s TTL.
    let released = Instant::now();
    parked_lock.release().await.unwrap();
    let served = tokio::time::timeout(Duration::from_secs(8), parked).await;
    eprintln!(
        "parked waiter after the release: {:?} {served:?}",
        released.elapsed()
    );
    assert!(
        matches!(&served, Ok(Ok(Ok(Some(_))))),
        "the parked waiter was not served within 8 s of the release: {served:?}"
    );
    if let Ok(Ok(Ok(Some(guard)))) = served {
        guard.release().await.unwrap();
    }

    // The flow of the connection that replaced it goes silent too; the next SUBSCRIBE comes
    // long before its next check, so it meets the silence first.
    proxy.forget_pubsub_flows();

    // A bounded wait on a lock held throughout ends about on time.
    let taken = direct.lock("quiet:held").acquire().await.unwrap();
    let asked = Instant::now();
    let bounded = tokio::time::timeout(
        Duration::from_secs(6),
        cut_off
            .lock("quiet:held")
            .try_acquire_for(Duration::from_millis(500)),
    )
    .await;
    eprintln!(
        "a 500 ms wait ended after {:?}: {bounded:?}",
        asked.elapsed()
    );
    assert!(
        matches!(bounded, Ok(Ok(None))),
        "a 500 ms wait did not end within 6 s: {bounded:?}"
    );

    // A waiter gets a lock released under it long before the holder's 30 s TTL.
    let waiter = tokio::spawn({
        let lock = cut_off.lock("quiet:held");
        async move {
            let asked = Instant::now();
            (lock.try_acquire_for(Duration::from_secs(25)).await, asked)
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    taken.release().await.unwrap();
    let served = tokio::time::timeout(Duration::from_secs(5), waiter).await;
    eprintln!("after the release: {:?} {served:?}", released.elapsed());
    assert!(
        matches!(&served, Ok(Ok((Ok(Some(_)), _)))),
        "the waiter was not served within 5 s of the release: {served:?}"
    );
    cut_off.shutdown().await;
    direct.shutdown().await;
}

/// docs/protocol.md, "Requests sent again: request latches": a synchronizer request whose reply
/// never came is sent again with the same latch and "the run that finds its id replies the
/// recorded reply and changes nothing. So a semaphore's `DECRBY` … is counted once"; and
/// `Semaphore::acquire`'s cancel safety: "Dropping the future removes the waiter; permits taken
/// after that are given back". Here a plain semaphore's acquire runs in Redis and takes its
/// permits, its replies are lost, and its caller drops the future. Once replies flow again
/// (well within the resend horizon, a third of the 30 s watchdog timeout) the permits must
/// come back: a plain semaphore's permits have no lease, so kept they are lost for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_acquire_that_ran_but_whose_reply_was_lost_gives_its_permits_back() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let proxy = Proxy::start(server.port());
    let cut_off = LockManager::start(slow_watchdog(proxy.url()))
        .await
        .unwrap();
    let direct = LockManager::start(straight(server.url())).await.unwrap();
    let sem = cut_off.semaphore("lost-permits");
    assert!(sem.try_set_permits(3).await.unwrap());

    proxy.cut_replies();
    let dropped = tokio::time::timeout(Duration::from_millis(600), sem.acquire(2)).await;
    assert!(dropped.is_err(), "a grant came through a cut: {dropped:?}");
    // It ran, once: two of three taken, though the caller never heard of it.
    let free: String = raw.get("lost-permits").unwrap();
    assert_eq!(free, "1", "the acquire did not run exactly once");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let healed = Instant::now();
    proxy.heal();
    let all_back = support::wait::eventually(Duration::from_secs(5), || {
        raw.get::<_, String>("lost-permits").is_ok_and(|v| v == "3")
    })
    .await;
    let free: String = raw.get("lost-permits").unwrap();
    eprintln!("free permits {free} {:?} after the heal", healed.elapsed());
    assert!(
        all_back,
        "the dropped caller's permits were not given back: {free} free"
    );
    // And they are usable by anyone.
    let theirs = direct
        .semaphore("lost-permits")
        .try_acquire(3)
        .await
        .unwrap()
        .expect("all three permits free");
    theirs.release().await.unwrap();
    cut_off.shutdown().await;
    direct.shutdown().await;
}

/// `Semaphore::try_acquire_for` and `PermitSemaphore::try_acquire_for`: "Waits up to `wait`
/// for `permits` permits; `None` once `wait` has passed"; `CountDownLatch::wait_for`: "Waits up
/// to `timeout`"; `try_acquire`: "One attempt". A lock's bounded wait keeps its word when
/// replies go missing (here, and tests/failure.rs with Redis down). With replies lost (an
/// asymmetric cut), each synchronizer call must still end about when its wait does, not when
/// the request's resend horizon (a third of the watchdog timeout, 10 s here) runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronizer_bounded_waits_end_on_time_when_replies_are_lost() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let cut_off = LockManager::start(slow_watchdog(proxy.url()))
        .await
        .unwrap();
    let lock = cut_off.lock("late:lock");
    support::commands::load_scripts(&lock).await;
    let sem = cut_off.semaphore("late:sem");
    assert!(sem.try_set_permits(3).await.unwrap());
    let psem = cut_off.permit_semaphore("late:psem");
    assert!(psem.try_set_permits(3).await.unwrap());
    let latch = cut_off.count_down_latch("late:latch");
    assert!(latch.try_set_count(1).await.unwrap());
    proxy.cut_replies();

    let wait = Duration::from_millis(400);
    // Generous: the wait, a response timeout and a loaded machine; the horizon is 10 s.
    let limit = Duration::from_secs(3);
    let mut late = Vec::new();
    let t = Instant::now();
    let r = lock.try_acquire_for(wait).await.map(|g| g.is_some());
    eprintln!("lock try_acquire_for(400ms): {:?} {r:?}", t.elapsed());
    assert!(t.elapsed() < limit, "the lock's own wait overran: control");
    let t = Instant::now();
    let r = sem.try_acquire_for(1, wait).await.map(|g| g.is_some());
    eprintln!("semaphore try_acquire_for(400ms): {:?} {r:?}", t.elapsed());
    if t.elapsed() >= limit {
        late.push(format!("semaphore try_acquire_for: {:?}", t.elapsed()));
    }
    let t = Instant::now();
    let r = psem.try_acquire_for(1, wait).await.map(|g| g.is_some());
    eprintln!(
        "permit semaphore try_acquire_for(400ms): {:?} {r:?}",
        t.elapsed()
    );
    if t.elapsed() >= limit {
        late.push(format!(
            "permit semaphore try_acquire_for: {:?}",
            t.elapsed()
        ));
    }
    let t = Instant::now();
    let r = latch.wait_for(wait).await;
    eprintln!("latch wait_for(400ms): {:?} {r:?}", t.elapsed());
    if t.elapsed() >= limit {
        late.push(format!("latch wait_for: {:?}", t.elapsed()));
    }
    let t = Instant::now();
    let r = sem.try_acquire(1).await.map(|g| g.is_some());
    eprintln!("semaphore try_acquire: {:?} {r:?}", t.elapsed());
    if t.elapsed() >= limit {
        late.push(format!("semaphore try_acquire: {:?}", t.elapsed()));
    }
    proxy.heal();
    assert!(
        late.is_empty(),
        "waits of 400 ms (or one try) took {late:?}"
    );
    cut_off.shutdown().await;
}
