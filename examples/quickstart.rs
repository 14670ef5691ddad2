//! Quick start: two workers contend for one lock and print a timeline of who waits, who holds,
//! and how a release wakes the other at once; then a bounded wait that gives up.
//!
//! Run: `cargo run --example quickstart` (uses `REDIS_URL`, else 127.0.0.1:6379, else starts a
//! private redis-server for the run).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use lockman::{LockError, LockManager};

#[tokio::main]
async fn main() {
    let (url, _server) = support::example::or_exit(support::example::redis_for_example());
    if let Err(e) = run(&url).await {
        eprintln!("quickstart failed: {e}");
        std::process::exit(1);
    }
}

async fn run(url: &str) -> Result<(), LockError> {
    let manager = LockManager::connect(url).await?;
    let start = Instant::now();
    let log = move |who: &str, what: &str| {
        println!(
            "{:>6.0} ms  {who:<6} {what}",
            start.elapsed().as_secs_f64() * 1000.0
        );
    };
    println!(
        "client id {}, lock \"quickstart:report\"\n",
        manager.client_id()
    );

    let mut workers = Vec::new();
    for (who, delay) in [("alice", 0), ("bob", 20)] {
        let lock = manager.lock("quickstart:report");
        workers.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            log(who, "wants the lock");
            let guard = lock.acquire().await?;
            log(who, &format!("holds it (holder {})", lock.holder_id()));
            tokio::time::sleep(Duration::from_millis(300)).await;
            log(who, "releases it");
            guard.release().await
        }));
    }
    for w in workers {
        w.await.expect("worker task")?;
    }

    let held = manager.lock("quickstart:report").acquire().await?;
    log("carol", "holds it; dave will wait at most 200 ms");
    let dave = manager.lock("quickstart:report");
    match dave.try_acquire_for(Duration::from_millis(200)).await? {
        Some(_) => log("dave", "got it (unexpected)"),
        None => log("dave", "gave up after 200 ms"),
    }
    held.release().await?;
    log("carol", "released; done");
    manager.shutdown().await;
    Ok(())
}
