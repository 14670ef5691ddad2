//! lockman's spans, printed: one per acquire and per release, with the lock's name and kind, how
//! long the caller would wait, the outcome, whether it waited, and how long it took (`time.idle`
//! is the time spent waiting). Two tasks contend for one lock, then a semaphore and a latch.
//! An OpenTelemetry layer in place of the printing one sends the same spans to a tracer.
//!
//! Run: `cargo run --example tracing` (uses `REDIS_URL`, else 127.0.0.1:6379, else starts a
//! private redis-server for the run). The spans are at DEBUG level under the `lockman` target:
//! `lockman=debug` in a filter turns them on.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use lockman::{LockError, LockManager};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

#[tokio::main]
async fn main() {
    let (url, _server) = support::example::or_exit(support::example::redis_for_example());
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new("lockman=debug,lockman::actors=info"))
        .with_span_events(FmtSpan::CLOSE)
        .with_target(false)
        .init();
    if let Err(e) = run(&url).await {
        eprintln!("tracing example failed: {e}");
        std::process::exit(1);
    }
}

async fn run(url: &str) -> Result<(), LockError> {
    let manager = LockManager::connect(url).await?;
    let (a, b) = (
        manager.lock("tracing-example:orders:42"),
        manager.lock("tracing-example:orders:42"),
    );
    let held = a.acquire().await?;
    let waiter = tokio::spawn(async move {
        // Waits about 120 ms: its span shows waited=true and the time idle.
        let guard = b.acquire().await?;
        guard.release().await
    });
    tokio::time::sleep(Duration::from_millis(120)).await;
    held.release().await?;
    waiter.await.map_err(|_| LockError::Shutdown)??;
    let none = manager
        .lock("tracing-example:orders:42")
        .try_acquire_for(Duration::from_millis(1))
        .await?;
    drop(none);

    let exports = manager.permit_semaphore("tracing-example:exports");
    exports.try_set_permits(1).await?;
    exports.acquire(1).await?.release().await?;
    let ready = manager.count_down_latch("tracing-example:ready");
    ready.try_set_count(1).await?;
    ready.count_down().await?;
    ready.wait().await?;
    manager.shutdown().await;
    Ok(())
}
