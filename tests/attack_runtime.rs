//! A caller's runtime that stands still. From a plain tokio program lockman runs its actors on
//! an actix System of its own, on background threads (src/lib.rs, "Quick start"; README: "Works
//! inside an actix System … and from plain `#[tokio::main]`"), and the watchdog renews every
//! hold taken without a lease "for as long as it is held". So a holder whose own runtime is
//! blocked (a long synchronous call on its only thread) keeps its lock: nothing of lockman runs
//! on that thread. Checked from outside, with a raw connection polling the hash while the
//! caller's thread sleeps through three watchdog timeouts.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockman::{Config, LockManager};
use redis::Commands;
use support::RedisServer;

const WATCHDOG: Duration = Duration::from_millis(1500);

#[test]
fn a_holder_whose_current_thread_runtime_is_blocked_keeps_its_lock() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (mgr, guard) = rt.block_on(async {
        let config = Config::new(server.url())
            .watchdog_timeout(WATCHDOG)
            .response_timeout(Duration::from_millis(300));
        let mgr = LockManager::start(config).await.unwrap();
        let guard = mgr.lock("blocked").acquire().await.unwrap();
        (mgr, guard)
    });
    let holder = guard.holder_id().to_owned();

    // Watches the hash from another thread while the caller's only thread is blocked.
    let stop = Arc::new(AtomicBool::new(false));
    let missing = Arc::new(AtomicU64::new(0));
    let min_pttl = Arc::new(AtomicU64::new(u64::MAX));
    let watcher = {
        let (stop, missing, min_pttl) = (stop.clone(), missing.clone(), min_pttl.clone());
        let mut raw = server.conn();
        let holder = holder.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let count: Option<String> = raw.hget("blocked", &holder).unwrap();
                let pttl: i64 = raw.pttl("blocked").unwrap();
                if count.as_deref() != Some("1") || pttl <= 0 {
                    missing.fetch_add(1, Ordering::SeqCst);
                } else {
                    min_pttl.fetch_min(pttl as u64, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let other = {
        let url = server.url();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async {
                let config = Config::new(url).watchdog_timeout(WATCHDOG);
                let mgr = LockManager::start(config).await.unwrap();
                // Asks throughout the stall: never let in.
                let got = mgr
                    .lock("blocked")
                    .try_acquire_for(WATCHDOG * 3)
                    .await
                    .unwrap();
                let got_in = got.is_some();
                drop(got);
                mgr.shutdown().await;
                got_in
            })
        })
    };

    // The caller's runtime stands still: its only thread sleeps, inside `block_on`.
    let blocked_at = Instant::now();
    rt.block_on(async {
        std::thread::sleep(WATCHDOG * 3);
    });
    let other_got_in = other.join().unwrap();
    stop.store(true, Ordering::SeqCst);
    watcher.join().unwrap();
    eprintln!(
        "blocked {:?}; lowest PTTL seen {} ms",
        blocked_at.elapsed(),
        min_pttl.load(Ordering::SeqCst)
    );
    assert_eq!(
        missing.load(Ordering::SeqCst),
        0,
        "the hold was gone or had no TTL while the caller's runtime was blocked"
    );
    assert!(!other_got_in, "another client got in during the stall");
    assert!(!guard.is_lost(), "the guard says it was lost");
    assert!(guard.valid_until() > Instant::now(), "validity ran out");
    rt.block_on(async {
        guard.release().await.unwrap();
        mgr.shutdown().await;
    });
    let mut raw = server.conn();
    assert!(!raw.exists::<_, bool>("blocked").unwrap());
}
