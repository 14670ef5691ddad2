//! A synchronizer's bounded wait ends at its wait while Redis does not answer, and nothing its
//! caller left behind stays taken. The server is paused (`CLIENT PAUSE … ALL`) for 5 s, much
//! longer than the waits (400 ms) and the response time-out (1 s), much shorter than how long a
//! request is sent again (a third of the default 30 s watchdog timeout): every request sent
//! meanwhile runs when the pause ends, after its caller was answered, with
//! `LockError::Unavailable` (Redis did not answer its last attempt; the crate docs, "When Redis
//! is away"). `try_acquire_for` waits up to `wait`, `wait_for` up to `timeout`; docs/protocol.md, "Requests sent again": a request sent again is counted once,
//! and a take that ran after its waiter left is given back.

mod support;

use std::time::{Duration, Instant};

use lockman::{Config, LockManager};
use redis::Commands;
use support::{RedisServer, wait::eventually};

const RESPONSE: Duration = Duration::from_millis(1000);
const STALL: f64 = 5.0;
const WAIT: Duration = Duration::from_millis(400);
/// Generous for a loaded machine; the requests are sent again for 10 s, the pause lasts 5 s.
const SLACK: Duration = Duration::from_millis(1500);

/// The free count of a semaphore or permit semaphore (`None`: no key).
fn count(raw: &mut redis::Connection, key: &str) -> Option<i64> {
    raw.get(key).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_waits_end_on_time_while_redis_is_paused_and_nothing_taken_is_kept() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    // The default watchdog timeout (30 s): a request is sent again for 10 s.
    let mgr = LockManager::start(Config::new(server.url()).response_timeout(RESPONSE))
        .await
        .unwrap();
    let sem = mgr.semaphore("wait:sem");
    assert!(sem.try_set_permits(3).await.unwrap());
    let psem = mgr.permit_semaphore("wait:psem");
    assert!(psem.try_set_permits(3).await.unwrap());
    let latch = mgr.count_down_latch("wait:latch");
    assert!(latch.try_set_count(1).await.unwrap());
    // Every script a take or a give-back runs is loaded before the pause.
    sem.try_acquire(1)
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    psem.try_acquire(1)
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    // A waiter parked before the pause, whose deadline comes during it: its last attempt gets
    // no reply.
    let full = mgr.semaphore("wait:full");
    assert!(full.try_set_permits(1).await.unwrap());
    let held = full.try_acquire(1).await.unwrap().unwrap();
    let parked_wait = Duration::from_millis(1500);
    let parked = {
        let full = full.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            let r = full
                .try_acquire_for(1, parked_wait)
                .await
                .map(|g| g.is_some());
            (r, t.elapsed())
        })
    };
    assert!(
        support::wait::subscribed(&mut raw, "redisson_sc:{wait:full}", Duration::from_secs(3))
            .await,
        "the waiter parked"
    );

    let stall = server.stall(STALL);
    let paused = Instant::now();
    let timed = |start: Instant| start.elapsed();
    let (sem_r, psem_r, latch_r, once_r) = tokio::join!(
        async {
            let t = Instant::now();
            let r = sem.try_acquire_for(1, WAIT).await.map(|g| g.is_some());
            (r, timed(t))
        },
        async {
            let t = Instant::now();
            let r = psem.try_acquire_for(1, WAIT).await.map(|g| g.is_some());
            (r, timed(t))
        },
        async {
            let t = Instant::now();
            let r = latch.wait_for(WAIT).await;
            (r, timed(t))
        },
        async {
            let t = Instant::now();
            let r = sem.try_acquire(1).await.map(|g| g.is_some());
            (r, timed(t))
        },
    );
    let (parked_r, parked_took) = parked.await.unwrap();
    let during = paused.elapsed();
    eprintln!(
        "semaphore try_acquire_for: {sem_r:?}; permit semaphore try_acquire_for: {psem_r:?}; \
         latch wait_for: {latch_r:?}; semaphore try_acquire: {once_r:?}; parked waiter: \
         {parked_r:?} in {parked_took:?}; all answered {during:?} into the pause"
    );
    assert!(
        during < Duration::from_secs_f64(STALL),
        "answered during the pause, not after it"
    );
    for (what, took) in [
        ("semaphore try_acquire_for", sem_r.1),
        ("permit semaphore try_acquire_for", psem_r.1),
        ("latch wait_for", latch_r.1),
    ] {
        assert!(took >= WAIT, "{what} ended before its wait: {took:?}");
        assert!(took < WAIT + SLACK, "{what} overran its wait: {took:?}");
    }
    assert!(
        parked_took >= parked_wait && parked_took < parked_wait + SLACK,
        "the parked waiter's wait of {parked_wait:?} took {parked_took:?}"
    );
    // Nothing granted to callers who left: their wait ran out with the outcome unknown, and
    // they are told Redis did not answer (issue 57: `Unavailable`, no longer `Ok(false)`).
    let away = |r: &Result<bool, lockman::LockError>| matches!(r, Err(e @ lockman::LockError::Unavailable { .. }) if e.is_retryable());
    assert!(away(&sem_r.0), "{:?}", sem_r.0);
    assert!(away(&psem_r.0), "{:?}", psem_r.0);
    assert!(away(&latch_r.0), "{:?}", latch_r.0);
    assert!(away(&parked_r), "{parked_r:?}");
    // A single attempt fails as a lock's does when its reply is missing: after a response
    // time-out, with a retryable error.
    assert!(
        once_r.1 < RESPONSE + SLACK,
        "semaphore try_acquire took {:?}",
        once_r.1
    );
    assert!(
        once_r.0.as_ref().is_err_and(|e| e.is_retryable()),
        "{:?}",
        once_r.0
    );

    stall.join().unwrap();
    // The requests ran when the pause ended, and were sent again; whatever they took goes back,
    // once: every permit is free again but the one `held` keeps, no permit id is left, the
    // latch's count is untouched.
    let conserved = |raw: &mut redis::Connection| {
        let ids: u64 = raw.zcard("{wait:psem}:timeout").unwrap();
        (
            count(raw, "wait:sem"),
            count(raw, "wait:psem"),
            ids,
            count(raw, "wait:latch"),
            count(raw, "wait:full"),
        )
    };
    let expected = (Some(3), Some(3), 0, Some(1), Some(0));
    let settled = eventually(Duration::from_secs(10), || conserved(&mut raw) == expected).await;
    assert!(
        settled,
        "(semaphore, permit semaphore, its ids, latch, full) read {:?}, want {expected:?}",
        conserved(&mut raw)
    );
    // Nothing more comes back later (a take given back twice would show here).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(conserved(&mut raw), expected);
    held.release().await.unwrap();
    assert_eq!(count(&mut raw, "wait:full"), Some(1));
    mgr.shutdown().await;
}
