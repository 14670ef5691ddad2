//! `valid_until` and `scope`: scoped work stops before a hold can expire, never after, when
//! Redis freezes; healthy renewals keep it running; every guard kind has a validity.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockManager, MultiLock};
use redis::Commands;
use support::{RedisServer, wait::eventually};

/// Scope's default margin is a tenth of it: 200 ms of slack for a loaded machine.
const WATCHDOG: Duration = Duration::from_millis(2000);

async fn manager(server: &RedisServer) -> LockManager {
    let config = Config::new(server.url())
        .watchdog_timeout(WATCHDOG)
        .response_timeout(Duration::from_millis(300));
    LockManager::start(config).await.expect("manager starts")
}

/// Work that counts its steps (one every 5 ms) until it is dropped.
async fn count_steps(steps: Arc<AtomicU64>) {
    loop {
        steps.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Pauses Redis's writes (scripts included) for `millis`, and reads the lock's PTTL once the
/// pause is in effect: nothing can renew it from then on, so the key lives until at least
/// `sent + PTTL`, where `sent` is when the PTTL was sent (it ran no earlier).
fn freeze_writes(server: &RedisServer, key: &str, millis: u64) -> Instant {
    let mut conn = server.conn();
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(millis)
        .arg("WRITE")
        .query::<()>(&mut conn)
        .expect("CLIENT PAUSE WRITE");
    let sent = Instant::now();
    let pttl: i64 = conn.pttl(key).expect("PTTL while paused");
    assert!(pttl > 0, "the key has a TTL: {pttl}");
    sent + Duration::from_millis(pttl as u64)
}

#[tokio::test]
async fn scoped_work_stops_before_a_frozen_redis_lets_the_key_expire() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let guard = mgr.lock("frozen").acquire().await.unwrap();
    let steps = Arc::new(AtomicU64::new(0));
    let work = guard.scope(count_steps(steps.clone()));
    let freeze = async {
        // Renewed twice or more first (from 1/6 of the timeout, every third of it).
        tokio::time::sleep(WATCHDOG * 6 / 5).await;
        let expires_no_sooner = freeze_writes(&server, "frozen", 3000);
        (Instant::now(), expires_no_sooner)
    };
    let (res, (frozen_at, expires_no_sooner)) = tokio::join!(work, freeze);
    let stopped = Instant::now();
    assert!(
        matches!(res, Err(LockError::HoldExpiring { ref name }) if name == "frozen"),
        "{res:?}"
    );
    assert!(stopped > frozen_at, "stopped while Redis was healthy");
    assert!(
        stopped < expires_no_sooner,
        "stopped {:?} after the key could expire",
        stopped - expires_no_sooner
    );
    // Dropped: no step after the scope returned.
    let after = steps.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(steps.load(Ordering::SeqCst), after);
    assert!(guard.valid_until() <= expires_no_sooner);
    // Once Redis runs again the key is found expired and the hold lost.
    assert!(eventually(Duration::from_secs(6), || guard.is_lost()).await);
    assert_eq!(raw.exists::<_, bool>("frozen"), Ok(false));
}

#[tokio::test]
async fn renewals_keep_scoped_work_running_past_several_timeouts() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let guard = mgr.lock("renewed").acquire().await.unwrap();
    let first = guard.valid_until();
    let res = guard.scope(tokio::time::sleep(WATCHDOG * 2)).await;
    assert!(res.is_ok(), "{res:?}");
    // Each renewal moved it on: over a timeout later than the grant's.
    assert!(guard.valid_until() >= first + WATCHDOG);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_lease_hold_stops_its_work_before_the_lease_ends_and_a_lost_hold_says_so() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    // 3 s: scope's margin, a tenth, is 300 ms of slack for a loaded machine.
    let lease = Duration::from_secs(3);
    let sent = Instant::now();
    let guard = mgr.lock("leased").acquire_with_lease(lease).await.unwrap();
    let pttl: i64 = raw.pttl("leased").unwrap();
    let expires_no_sooner =
        Instant::now() - Duration::from_millis(2) + Duration::from_millis(pttl as u64).min(lease);
    // The lease's validity: from the send, less 1 % + 2 ms.
    let valid = guard.valid_until();
    assert!(valid >= sent + lease - lease / 100 - Duration::from_millis(2));
    assert!(valid <= Instant::now() + lease);
    let res = guard.scope(std::future::pending::<()>()).await;
    let stopped = Instant::now();
    assert!(
        matches!(res, Err(LockError::HoldExpiring { .. })),
        "{res:?}"
    );
    assert!(
        stopped < expires_no_sooner,
        "stopped after the lease could end"
    );
    assert!(stopped >= sent + lease / 2, "stopped too early");
    drop(guard);

    // A hold whose key is deleted is lost at the next renewal: HoldLost.
    let guard = mgr.lock("deleted").acquire().await.unwrap();
    let _: () = raw.del("deleted").unwrap();
    let res = guard.scope(std::future::pending::<()>()).await;
    assert!(
        matches!(res, Err(LockError::HoldLost { ref name }) if name == "deleted"),
        "{res:?}"
    );
}

#[tokio::test]
async fn scope_with_margin_stops_the_work_that_margin_before_the_validity_ends() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let lease = Duration::from_secs(4);
    let margin = Duration::from_millis(1_500);
    let guard = mgr.lock("margin").acquire_with_lease(lease).await.unwrap();
    let valid = guard.valid_until();
    let steps = Arc::new(AtomicU64::new(0));
    let res = guard
        .scope_with_margin(margin, count_steps(steps.clone()))
        .await;
    let stopped = Instant::now();
    assert!(
        matches!(res, Err(LockError::HoldExpiring { ref name }) if name == "margin"),
        "{res:?}"
    );
    // Not before the margin (timers never fire early), and well before the default tenth's
    // 400 ms would stop it: 750 ms of slack for a loaded machine on each side of that.
    assert!(
        stopped + Duration::from_millis(5) >= valid - margin,
        "stopped {:?} before the margin",
        (valid - margin) - stopped
    );
    assert!(
        stopped < valid - margin / 2,
        "stopped {:?} before the end: not the 1.5 s margin",
        valid - stopped
    );
    assert!(steps.load(Ordering::SeqCst) > 0, "the work ran meanwhile");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn every_guard_kind_has_a_validity() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let before = Instant::now();
    let fenced = mgr.fenced_lock("f").acquire().await.unwrap();
    assert!(fenced.valid_until() > before + WATCHDOG / 2);
    let multi = MultiLock::new(vec![mgr.lock("m1"), mgr.lock("m2")]);
    let both = multi
        .acquire_with_lease(Duration::from_millis(1500))
        .await
        .unwrap();
    let v = both.valid_until();
    assert!(
        v > before + Duration::from_millis(1000)
            && v < Instant::now() + Duration::from_millis(1500)
    );
    assert_eq!(both.scope(async { 7 }).await.unwrap(), 7);
    let permits = mgr.permit_semaphore("ps");
    assert!(permits.try_set_permits(1).await.unwrap());
    let p = permits.acquire(1).await.unwrap();
    assert!(p.valid_until().is_some_and(|v| v > before + WATCHDOG / 2));
    let plain = mgr.semaphore("s");
    assert!(plain.try_set_permits(1).await.unwrap());
    let s = plain.acquire(1).await.unwrap();
    // A plain semaphore's permits never expire: no deadline, and scope only ends on loss.
    assert_eq!(s.valid_until(), None);
    assert_eq!(s.scope(async { 1 }).await.unwrap(), 1);
}

/// A loss ends the scoped work as soon as the guard knows it, not when the validity runs out:
/// a hold's end drops what confirmed it as it raises the loss, and scope must see the loss
/// whichever of the two it looks at first (eight holds: one of them would miss it by chance).
#[tokio::test]
async fn a_lost_hold_stops_its_scope_when_the_loss_is_known_not_at_the_deadline() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    // Long enough that the deadline (a tenth of it before the validity ends) is seconds after
    // the first renewal, which finds the keys gone.
    let watchdog = Duration::from_secs(6);
    let config = Config::new(server.url()).watchdog_timeout(watchdog);
    let mgr = LockManager::start(config).await.unwrap();
    let mut guards = Vec::new();
    for i in 0..8 {
        guards.push(mgr.lock(format!("gone:{i}")).acquire().await.unwrap());
    }
    for i in 0..8 {
        let _: () = raw.del(format!("gone:{i}")).unwrap();
    }
    let ends = futures_util::future::join_all(guards.iter().map(|guard| async move {
        let res = guard.scope(std::future::pending::<()>()).await;
        (res, Instant::now())
    }))
    .await;
    for (guard, (res, ended)) in guards.iter().zip(ends) {
        assert!(matches!(res, Err(LockError::HoldLost { .. })), "{res:?}");
        assert!(guard.is_lost());
        // The deadline scope would stop at without the loss: the validity less its margin.
        let deadline = guard.valid_until() - watchdog / 10;
        assert!(
            ended + Duration::from_secs(1) < deadline,
            "{} stopped {:?} before its deadline: at the deadline, not at the loss",
            guard.name(),
            deadline.saturating_duration_since(ended)
        );
    }
}

/// The work's next step never runs once its hold may be gone, even when this task's thread
/// stalls past the stop instant and what the work awaited completed during the stall: Redis's
/// writes are paused (no renewal can succeed), this runtime's only thread is blocked until
/// past the key's expiry, and the event the work awaits fires during the block. When the
/// thread runs again, both the event and the deadline are ready; the work must not write.
///
/// `scope` gets the work and returns the guard's scope of it; `key` is a key of the hold, and
/// `remaining` reads how long Redis keeps the hold from now (the PTTL, for locks).
async fn stalled_past_the_deadline<'g, S, Fut>(
    server: &RedisServer,
    key: &str,
    remaining: fn(&mut redis::Connection, &str) -> i64,
    scope: S,
) where
    S: FnOnce(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>) -> Fut,
    Fut: std::future::Future<Output = Result<(), LockError>> + 'g,
{
    let wrote = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (fire, fired) = tokio::sync::oneshot::channel::<()>();
    let work = Box::pin({
        let wrote = wrote.clone();
        async move {
            let _ = fired.await;
            wrote.store(true, Ordering::SeqCst);
        }
    });
    // Another OS thread pauses writes, learns when the key can expire at the soonest, and
    // fires the work's event after that (while this thread is still blocked).
    let (expiry_tx, expiry_rx) = std::sync::mpsc::channel::<Instant>();
    let conn_server = server.url();
    let key = key.to_owned();
    let outside = std::thread::spawn(move || {
        let client = redis::Client::open(conn_server).unwrap();
        let mut conn = client.get_connection().unwrap();
        redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(4000)
            .arg("WRITE")
            .query::<()>(&mut conn)
            .expect("CLIENT PAUSE WRITE");
        let sent = Instant::now();
        let pttl = remaining(&mut conn, &key);
        assert!(pttl > 0, "the hold has a TTL: {pttl}");
        let expires_no_sooner = sent + Duration::from_millis(pttl as u64);
        expiry_tx.send(expires_no_sooner).unwrap();
        std::thread::sleep(
            (expires_no_sooner + Duration::from_millis(200)).saturating_duration_since(sent),
        );
        fire.send(()).unwrap();
    });
    let block = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Blocks this runtime's one thread: the scope is not polled until past the expiry.
        let expires_no_sooner = expiry_rx.recv().unwrap();
        std::thread::sleep(
            (expires_no_sooner + Duration::from_millis(500))
                .saturating_duration_since(Instant::now()),
        );
        expires_no_sooner
    };
    let (res, expires_no_sooner) = tokio::join!(scope(work), block);
    outside.join().unwrap();
    redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query::<()>(&mut server.conn())
        .expect("CLIENT UNPAUSE");
    assert!(Instant::now() > expires_no_sooner);
    assert!(
        matches!(
            res,
            Err(LockError::HoldExpiring { .. } | LockError::HoldLost { .. })
        ),
        "the scope answered {res:?} after its hold could expire"
    );
    assert!(
        !wrote.load(Ordering::SeqCst),
        "the work took its next step after the hold could expire"
    );
}

/// A lock's PTTL.
fn pttl(conn: &mut redis::Connection, key: &str) -> i64 {
    conn.pttl(key).expect("PTTL while paused")
}

/// How long the one held permit of the permit semaphore `key` has: its expiry score (epoch ms)
/// in `{key}:timeout` less the server's clock.
fn permit_ttl(conn: &mut redis::Connection, key: &str) -> i64 {
    let held: Vec<(Vec<u8>, i64)> = conn
        .zrange_withscores(format!("{{{key}}}:timeout"), 0, -1)
        .expect("the held permits");
    assert_eq!(held.len(), 1, "one permit held");
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(conn).expect("TIME");
    held[0].1 - (secs * 1000 + micros / 1000)
}

#[tokio::test]
async fn a_stalled_thread_never_runs_scoped_work_past_the_deadline_for_any_guard() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;

    let guard = mgr.lock("stall-lock").acquire().await.unwrap();
    stalled_past_the_deadline(&server, "stall-lock", pttl, |work| guard.scope(work)).await;

    let guard = mgr
        .lock("stall-lease")
        .acquire_with_lease(WATCHDOG)
        .await
        .unwrap();
    stalled_past_the_deadline(&server, "stall-lease", pttl, |work| guard.scope(work)).await;

    let fenced = mgr.fenced_lock("stall-fenced").acquire().await.unwrap();
    stalled_past_the_deadline(&server, "stall-fenced", pttl, |work| fenced.scope(work)).await;

    let lead = mgr.election("stall-lead").campaign().await.unwrap();
    stalled_past_the_deadline(&server, "stall-lead", pttl, |work| lead.scope(work)).await;

    let multi = MultiLock::new(vec![mgr.lock("stall-m1"), mgr.lock("stall-m2")]);
    let both = multi.acquire().await.unwrap();
    stalled_past_the_deadline(&server, "stall-m1", pttl, |work| both.scope(work)).await;

    let permits = mgr.permit_semaphore("stall-permits");
    assert!(permits.try_set_permits(1).await.unwrap());
    let permit = permits.acquire(1).await.unwrap();
    stalled_past_the_deadline(&server, "stall-permits", permit_ttl, |work| {
        permit.scope(work)
    })
    .await;
}

/// `scope_with_margin` for every guard kind but the lock's (above): the work runs until
/// `margin` before the guard's validity ends, and is stopped there, not at the default tenth.
/// Each lease is 6 s and each margin 3 s, so the stop is 3 s in, with 1.5 s of slack for a
/// loaded machine on the late side; the default tenth would stop it only 600 ms before the end.
const LEASE: Duration = Duration::from_secs(6);
const MARGIN: Duration = Duration::from_secs(3);

/// Checks a stop of scoped work that counted `steps` at `stopped`, for a guard `valid` until
/// then: not before the margin (timers never fire early), well before the default tenth, and
/// no step once the scope returned (the work was dropped).
async fn stopped_at_the_margin(stopped: Instant, valid: Instant, steps: &AtomicU64) {
    assert!(
        stopped + Duration::from_millis(5) >= valid - MARGIN,
        "stopped {:?} before the margin",
        (valid - MARGIN) - stopped
    );
    assert!(
        stopped < valid - MARGIN / 2,
        "stopped {:?} before the end: not the 3 s margin",
        valid.saturating_duration_since(stopped)
    );
    let after = steps.load(Ordering::SeqCst);
    assert!(after > 0, "the work ran meanwhile");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(steps.load(Ordering::SeqCst), after, "the work still runs");
}

/// A MultiLock's scope stops at its margin before its leased members end; and, renewed, as soon
/// as one member is lost: a MultiLock needs every member, so the one left (still renewed, valid
/// for as long as the guard lives) does not keep the work running.
#[tokio::test]
async fn a_multilock_scope_with_margin_stops_at_its_margin_and_when_one_member_is_lost() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = manager(&server).await;
    let multi = MultiLock::new(vec![mgr.lock("mm1"), mgr.lock("mm2")]);
    let both = multi.acquire_with_lease(LEASE).await.unwrap();
    let steps = Arc::new(AtomicU64::new(0));
    let res = both
        .scope_with_margin(MARGIN, count_steps(steps.clone()))
        .await;
    let stopped = Instant::now();
    assert!(
        matches!(res, Err(LockError::HoldExpiring { .. })),
        "{res:?}"
    );
    stopped_at_the_margin(stopped, both.valid_until(), &steps).await;
    both.release().await.unwrap();

    let both = multi.acquire().await.unwrap();
    let _: () = raw.del("mm2").unwrap();
    let steps = Arc::new(AtomicU64::new(0));
    // Bounded: with the member's loss ignored the work would run as long as the guard lives.
    let res = tokio::time::timeout(
        WATCHDOG * 5,
        both.scope_with_margin(Duration::from_millis(100), count_steps(steps.clone())),
    )
    .await
    .expect("the scope went on after a member was lost");
    assert!(matches!(res, Err(LockError::HoldLost { .. })), "{res:?}");
    let after = steps.load(Ordering::SeqCst);
    assert!(after > 0, "the work ran meanwhile");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(steps.load(Ordering::SeqCst), after, "the work still runs");
    // The member left is still held (renewed): the stop came from the lost one.
    assert_eq!(raw.exists::<_, bool>("mm1"), Ok(true));
    assert_eq!(raw.exists::<_, bool>("mm2"), Ok(false));
    drop(both);
}

/// Leased permits: the scope stops at its margin before the lease ends (no renewal moves it).
#[tokio::test]
async fn a_leased_permit_scope_with_margin_stops_at_its_margin() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let permits = mgr.permit_semaphore("mps");
    assert!(permits.try_set_permits(2).await.unwrap());
    let guard = permits.acquire_with_lease(1, LEASE).await.unwrap();
    let steps = Arc::new(AtomicU64::new(0));
    // Bounded: with the lease ignored (no deadline) the work would run until the permit is lost.
    let res = tokio::time::timeout(
        LEASE * 2,
        guard.scope_with_margin(MARGIN, count_steps(steps.clone())),
    )
    .await
    .expect("the scope ran past the lease");
    let stopped = Instant::now();
    assert!(
        matches!(res, Err(LockError::HoldExpiring { ref name }) if name == "mps"),
        "{res:?}"
    );
    let valid = guard.valid_until().expect("leased permits have a validity");
    stopped_at_the_margin(stopped, valid, &steps).await;
    guard.release().await.unwrap();
}

/// A lead whose renewals stop (Redis's writes paused): the scope stops its margin before the
/// term's validity ends.
#[tokio::test]
async fn a_leaderships_scope_with_margin_stops_at_its_margin_when_renewals_stop() {
    let server = RedisServer::start();
    let config = Config::new(server.url())
        .watchdog_timeout(LEASE)
        .response_timeout(Duration::from_millis(300));
    let mgr = LockManager::start(config).await.unwrap();
    let lead = mgr.election("mlead").campaign().await.unwrap();
    let steps = Arc::new(AtomicU64::new(0));
    let work = lead.scope_with_margin(MARGIN, count_steps(steps.clone()));
    // Paused past the stop: no renewal is confirmed from the pause on.
    let expires_no_sooner = freeze_writes(&server, "mlead", 5000);
    let res = tokio::time::timeout(LEASE * 2, work)
        .await
        .expect("the scope ran on: not stopped at its margin while renewals stopped");
    let stopped = Instant::now();
    let valid = lead.valid_until();
    redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query::<()>(&mut server.conn())
        .expect("CLIENT UNPAUSE");
    assert!(
        matches!(res, Err(LockError::HoldExpiring { ref name }) if name == "mlead"),
        "{res:?}"
    );
    assert!(valid <= expires_no_sooner);
    stopped_at_the_margin(stopped, valid, &steps).await;
    lead.resign().await.unwrap();
}
