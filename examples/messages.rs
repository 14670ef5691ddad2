//! The message API: inside an actix System, resolve a lock name to its `LockActor` and send it
//! `Acquire` and `Release` yourself. This is what `Lock` and `LockGuard` do for you.
//!
//! Run: `cargo run --example messages` (uses `REDIS_URL`, else 127.0.0.1:6379, else starts a
//! private redis-server for the run).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use lockman::actix::{Acquire, Release, Wait};
use lockman::{LockError, LockKind, LockManager};

#[actix_rt::main]
async fn main() {
    let (url, _server) = support::example::or_exit(support::example::redis_for_example());
    if let Err(e) = run(&url).await {
        eprintln!("messages example failed: {e}");
        std::process::exit(1);
    }
}

async fn run(url: &str) -> Result<(), LockError> {
    let manager = LockManager::connect(url).await?;
    // Inside an actix System the actors run on this arbiter: sends are cheap, same-thread hops.
    let actor = manager.lock_actor("messages:example").await?;
    let lock = manager.lock("messages:example"); // for its holder id and read-only queries
    let holder = lock.holder_id();

    let acquire = Acquire {
        holder: holder.as_str().into(),
        lease: Some(Duration::from_secs(5)),
        wait: Wait::No,
        kind: LockKind::Reentrant,
        owner: Some(lockman::deadlock::current()),
        site: Some(lockman::deadlock::site()),
    };
    let guard = actor
        .send(acquire.clone())
        .await
        .map_err(|_| LockError::Shutdown)??;
    let guard = guard.expect("the lock is free");
    println!(
        "acquired as {} (lost: {})",
        guard.holder_id(),
        guard.is_lost()
    );

    // Re-entry: the same holder again.
    let again = actor
        .send(acquire)
        .await
        .map_err(|_| LockError::Shutdown)??
        .expect("re-entry");
    println!("re-entered; hold count {}", lock.hold_count().await?);

    // Another holder may not, and does not wait with Wait::No.
    let other = Acquire {
        holder: manager.lock("messages:example").holder_id().into(),
        lease: None,
        wait: Wait::No,
        kind: LockKind::Reentrant,
        owner: Some(lockman::deadlock::current()),
        site: Some(lockman::deadlock::site()),
    };
    let refused = actor.send(other).await.map_err(|_| LockError::Shutdown)??;
    println!("another holder got it: {}", refused.is_some());

    actor
        .send(Release(again))
        .await
        .map_err(|_| LockError::Shutdown)??;
    actor
        .send(Release(guard))
        .await
        .map_err(|_| LockError::Shutdown)??;
    println!("released twice; still locked: {}", lock.is_locked().await?);
    manager.shutdown().await;
    Ok(())
}
