//! RedLock over five independent Redis servers: two workers take turns; with two servers
//! stopped the lock still works on a majority; with a third stopped it reports the quorum error.
//!
//! Run: `cargo run --example redlock` (uses `REDIS_URLS=redis://a,redis://b,…` — five of them —
//! or starts five private redis-servers for the run; only then can it stop some).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use lockman::{LockError, LockManager, RedLock};

#[tokio::main]
async fn main() {
    let (urls, mut servers) = support::example::or_exit(support::example::servers_for_example(5));
    if let Err(e) = run(&urls, &mut servers).await {
        eprintln!("redlock example failed: {e}");
        std::process::exit(1);
    }
}

async fn run(urls: &[String], servers: &mut [support::RedisServer]) -> Result<(), LockError> {
    let mut managers = Vec::new();
    for url in &urls[..5] {
        managers.push(LockManager::connect(url).await?);
    }
    let red = || RedLock::new(managers.iter().map(|m| m.lock("example:red")).collect());
    let start = Instant::now();
    let at = || format!("{:>5.0} ms", start.elapsed().as_secs_f64() * 1000.0);

    let (alice, bob) = (red(), red());
    println!("quorum: {} of {}", alice.quorum(), alice.members().len());
    let guard = alice
        .try_acquire_with_lease(Duration::ZERO, Duration::from_secs(5))
        .await?
        .expect("free");
    let left = guard
        .validity_deadline()
        .map(|d| d.saturating_duration_since(Instant::now()));
    println!(
        "{}  alice holds {} members; validity left {left:?}",
        at(),
        guard.members_held()
    );
    let waiting = tokio::spawn(async move {
        let g = bob.acquire().await;
        (Instant::now(), g)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.release().await?;
    println!("{}  alice released", at());
    let (_, g) = waiting.await.expect("bob's task");
    let g = g?;
    println!(
        "{}  bob holds {} members (woken by the unlock messages)",
        at(),
        g.members_held()
    );
    g.release().await?;

    if servers.len() >= 5 {
        servers[0].stop();
        servers[1].stop();
        let g = red()
            .try_acquire_for(Duration::from_secs(1))
            .await?
            .expect("3 of 5 is a majority");
        println!(
            "{}  two servers down: still acquired, {} members",
            at(),
            g.members_held()
        );
        g.release().await?;
        servers[2].stop();
        match red().try_acquire_for(Duration::from_millis(300)).await {
            Err(e @ LockError::QuorumNotReached { .. }) => println!("{}  three down: {e}", at()),
            other => println!("{}  three down: unexpected {other:?}", at()),
        }
    } else {
        println!("(servers from REDIS_URLS: not stopping any)");
    }
    Ok(())
}
