//! Many waiters on one name giving up: N tasks wait on a lock that stays held, each for the same
//! short wait, and the bench times how long the lock actor takes to take them all in and answer
//! them all when their waits run out. The cost per waiter should not grow with N (linear in
//! all): a queue that searched itself on every departure would make it grow with N.
//!
//! Run: `cargo bench --bench waiters` (starts its own redis-server). Prints a table: N, the
//! median time beyond the wait (7 runs), and that time per waiter.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_millis(300);

fn main() {
    let server = support::RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let system = actix_rt::System::with_tokio_rt(|| rt);
    let url = server.url();
    let rows = system.block_on(async move {
        let mgr = lockman::LockManager::connect(&url).await.expect("connect");
        let held = mgr.lock("crowd").acquire().await.expect("hold");
        let mut rows = Vec::new();
        for n in [1_000usize, 5_000, 10_000, 20_000] {
            let mut runs = Vec::new();
            for _ in 0..7 {
                let started = Instant::now();
                let tasks: Vec<_> = (0..n)
                    .map(|_| {
                        let lock = mgr.lock("crowd");
                        actix_rt::spawn(async move { lock.try_acquire_for(WAIT).await })
                    })
                    .collect();
                for t in tasks {
                    let got = t.await.expect("task").expect("no error");
                    assert!(got.is_none(), "the lock is held");
                }
                runs.push(started.elapsed().saturating_sub(WAIT));
            }
            runs.sort();
            rows.push((n, runs[runs.len() / 2]));
        }
        held.release().await.expect("release");
        mgr.shutdown().await;
        rows
    });
    println!("\n| waiters | time beyond the wait (median of 7) | per waiter |");
    println!("|---|---|---|");
    for (n, t) in rows {
        println!(
            "| {n} | {:.1} ms | {:.2} µs |",
            t.as_secs_f64() * 1e3,
            t.as_secs_f64() * 1e6 / n as f64
        );
    }
    drop(server);
}
