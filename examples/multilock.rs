//! MultiLock: all of three locks on three Redis servers, or none. A transfer takes both accounts'
//! locks and an audit log's; a second transfer waits, holding nothing, until the first is done.
//!
//! Run: `cargo run --example multilock` (uses `REDIS_URLS=redis://a,redis://b,redis://c`, or
//! starts three private redis-servers for the run).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use lockman::{LockError, LockManager, MultiLock};

#[tokio::main]
async fn main() {
    let (urls, _servers) = support::example::or_exit(support::example::servers_for_example(3));
    if let Err(e) = run(&urls).await {
        eprintln!("multilock example failed: {e}");
        std::process::exit(1);
    }
}

async fn run(urls: &[String]) -> Result<(), LockError> {
    let mut managers = Vec::new();
    for url in &urls[..3] {
        managers.push(LockManager::connect(url).await?);
    }
    let names = ["example:account:1", "example:account:2", "example:audit"];
    let transfer = || MultiLock::new(managers.iter().zip(names).map(|(m, n)| m.lock(n)).collect());
    let start = Instant::now();
    let at = || format!("{:>5.0} ms", start.elapsed().as_secs_f64() * 1000.0);

    let first = transfer().acquire().await?;
    println!(
        "{}  transfer 1 holds all {} locks",
        at(),
        first.members_held()
    );
    let second = transfer();
    assert!(second.try_acquire().await?.is_none());
    println!(
        "{}  transfer 2: try_acquire -> None, and holds nothing",
        at()
    );
    let waiting = tokio::spawn(async move { second.acquire().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    first.release().await?;
    println!("{}  transfer 1 released", at());
    let g = waiting.await.expect("task")?;
    println!("{}  transfer 2 holds all {} locks", at(), g.members_held());
    g.release().await?;
    Ok(())
}
