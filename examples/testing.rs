//! Testing your own code's bad day with `lockman::testing`: a small ledger service that must
//! stop writing the moment its lock goes, and its tests — a lost hold stops the writing, a
//! client cut off from Redis stops before its hold's guarantee ends, a deadlock is retried, an
//! outage answers 503 through the tower layer. Each test fails if the service ignored the signal
//! it tests (the comment above each says how).
//!
//! Run: `cargo test --example testing --features testing,tower` (a redis-server or
//! valkey-server on the PATH, or `REDIS_SERVER_BIN`). `cargo run` shows one test's story.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lockman::{LockError, LockManager};

/// The service's storage: how many entries it wrote. (A database in a real service.)
#[derive(Default)]
pub struct Ledger {
    entries: AtomicU32,
}

impl Ledger {
    /// Entries written so far.
    pub fn entries(&self) -> u32 {
        self.entries.load(Ordering::SeqCst)
    }
}

/// Writes `count` entries to `account`'s ledger, one every 20 ms, only while it holds the
/// account's lock: `scope` stops the writing at its next await once the hold is lost or about to
/// expire unrenewed, and the error says which.
pub async fn post_entries(
    manager: &LockManager,
    account: &str,
    ledger: &Ledger,
    count: u32,
) -> Result<(), LockError> {
    let guard = manager.lock(format!("account:{account}")).acquire().await?;
    guard
        .scope(async {
            for _ in 0..count {
                ledger.entries.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await?;
    guard.release().await
}

/// Moves money between two accounts, holding both locks (taken in the caller's order, so two
/// opposite transfers can deadlock); a `Deadlock` answer drops the locks held and starts over.
/// Returns how many attempts it took.
pub async fn transfer(manager: &LockManager, from: &str, to: &str) -> Result<u32, LockError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let first = manager.lock(format!("account:{from}")).acquire().await?;
        tokio::time::sleep(Duration::from_millis(200)).await; // reading the balance
        match manager.lock(format!("account:{to}")).acquire().await {
            Ok(second) => {
                second.release().await?;
                first.release().await?;
                return Ok(attempt);
            }
            Err(LockError::Deadlock { .. }) => {
                drop(first);
                tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
            }
            Err(other) => return Err(other),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = lockman::testing::TestServer::start()?;
    let manager = LockManager::start(server.config()?).await?;
    let ledger = Arc::new(Ledger::default());
    let (m, l) = (manager.clone(), ledger.clone());
    let posting = tokio::spawn(async move { post_entries(&m, "a", &l, 1000).await });
    while ledger.entries() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.lose("account:a")?;
    println!("posting ended: {:?}", posting.await?);
    println!("entries written: {}", ledger.entries());
    manager.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockman::testing::TestServer;

    type Outcome = Result<(), Box<dyn std::error::Error>>;

    /// Breaks if `post_entries` wrote outside `scope` (it would go on writing all 1000).
    #[tokio::test]
    async fn a_lost_hold_stops_the_writing() -> Outcome {
        let server = TestServer::start()?;
        let manager = LockManager::start(server.config()?).await?;
        let ledger = Arc::new(Ledger::default());
        let (m, l) = (manager.clone(), ledger.clone());
        let posting = tokio::spawn(async move { post_entries(&m, "a", &l, 1000).await });
        // Written to only once its acquire has answered: the key alone in Redis is not yet a
        // hold the service knows of.
        while ledger.entries() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        server.lose("account:a")?;
        let ended = posting.await?;
        assert!(
            matches!(ended, Err(LockError::HoldLost { .. })),
            "{ended:?}"
        );
        let written = ledger.entries();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(ledger.entries(), written, "kept writing");
        assert!(written < 1000);
        Ok(())
    }

    /// Breaks if `post_entries` wrote outside `scope`: cut off, it would write past the time
    /// its hold is guaranteed (the last entry written after `valid_until`).
    #[tokio::test]
    async fn a_cut_off_client_stops_before_its_hold_ends() -> Outcome {
        let server = TestServer::start()?;
        let link = server.link()?;
        let manager = LockManager::start(link.config()).await?;
        let ledger = Arc::new(Ledger::default());
        let (m, l) = (manager.clone(), ledger.clone());
        let posting = tokio::spawn(async move { post_entries(&m, "b", &l, 1000).await });
        // Cut only once the acquire has answered (the first entry written): cut between the
        // key's write and its reply, the acquire itself would end `Unavailable`, a different story.
        while ledger.entries() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        link.cut();
        let ended = posting.await?;
        assert!(
            matches!(ended, Err(LockError::HoldExpiring { .. })),
            "{ended:?}"
        );
        // The hold was set to live 3 s from its last renewal: the lock is still the service's.
        assert!(
            server.holder("account:b")?.is_some(),
            "stopped only after the key expired"
        );
        let written = ledger.entries();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(ledger.entries(), written, "kept writing");
        Ok(())
    }

    /// Breaks if `transfer` gave up on `Deadlock` (one of the two would end in an error).
    #[tokio::test]
    async fn a_deadlock_is_retried() -> Outcome {
        let server = TestServer::start()?;
        let manager = LockManager::start(server.config()?).await?;
        // The two meet in a deadlock only when both took their first lock before either asks for
        // its second (200 ms apart at most): a machine that stalls one of them longer runs both
        // one after the other, so the pair is run again until they met.
        let mut runs = Vec::new();
        for _ in 0..5 {
            let (m1, m2) = (manager.clone(), manager.clone());
            let there = tokio::spawn(async move { transfer(&m1, "c", "d").await });
            let back = tokio::spawn(async move { transfer(&m2, "d", "c").await });
            // Either ending in an error (`Deadlock` given up on) fails the test here.
            let (there, back) = (there.await??, back.await??);
            // One of them was told of the deadlock and tried again.
            if there + back >= 3 {
                return Ok(());
            }
            runs.push((there, back));
        }
        panic!("no deadlock happened in five runs: attempts {runs:?}");
    }

    /// Breaks if the service turned the layer's refusal into a 200, or held its lock some other
    /// way that hangs while Redis is away.
    #[tokio::test]
    async fn an_outage_answers_503() -> Outcome {
        use axum::{Router, body::Body, http::Request, routing::post};
        use tower::Service;
        let server = TestServer::start()?;
        let manager = LockManager::start(server.config()?).await?;
        let mut app = Router::new()
            .route("/accounts/{id}/entries", post(|| async { "posted" }))
            .route_layer(lockman::tower::LockLayer::segment(manager, 1).prefix("account:"));
        server.cut();
        let request = Request::post("/accounts/e/entries").body(Body::empty())?;
        let answer = app.call(request).await?;
        assert_eq!(answer.status(), 503);
        Ok(())
    }
}
