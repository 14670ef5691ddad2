//! Fair lock: five workers in two managers (two client ids, as two processes would be) line up
//! 30 ms apart and are served in exactly that order, whatever process they are in; one gives up
//! and leaves the line without holding anyone up.
//!
//! Run: `cargo run --example fair` (uses `REDIS_URL`, else 127.0.0.1:6379, else starts a private
//! redis-server for the run).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use lockman::{LockError, LockManager};

#[tokio::main]
async fn main() {
    let (url, _server) = support::example::or_exit(support::example::redis_for_example());
    if let Err(e) = run(&url).await {
        eprintln!("fair example failed: {e}");
        std::process::exit(1);
    }
}

async fn run(url: &str) -> Result<(), LockError> {
    let managers = [
        LockManager::connect(url).await?,
        LockManager::connect(url).await?,
    ];
    let start = Instant::now();
    let at = move || format!("{:>5.0} ms", start.elapsed().as_secs_f64() * 1000.0);
    let held = managers[0].fair_lock("example:fair").acquire().await?;
    println!("{}  the lock is held; five workers line up", at());
    let mut workers = Vec::new();
    for i in 1..=5 {
        let lock = managers[i % 2].fair_lock("example:fair");
        workers.push(tokio::spawn(async move {
            if i == 3 {
                let got = lock.try_acquire_for(Duration::from_millis(100)).await?;
                println!(
                    "{}  worker 3 (manager {}) gives up and leaves the line: {}",
                    at(),
                    i % 2,
                    got.is_none()
                );
                return Ok(());
            }
            let g = lock.acquire().await?;
            println!("{}  worker {i} (manager {}) served", at(), i % 2);
            tokio::time::sleep(Duration::from_millis(20)).await;
            g.release().await
        }));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    held.release().await?;
    println!("{}  released", at());
    for w in workers {
        w.await.expect("worker task")?;
    }
    for m in &managers {
        m.shutdown().await;
    }
    Ok(())
}
