//! Leader election: a singleton job run by three campaigners. Each campaigns, runs the job only
//! while it leads (`Leadership::scope`), and fences its writes with its term. The leader is
//! killed twice (its task aborted); the example counts that the job never ran twice at once,
//! that no stale write was accepted, and how long each hand-over took.
//!
//! Run: `cargo run --example election` (uses `REDIS_URL`, else 127.0.0.1:6379, else starts a
//! private redis-server for the run).

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockManager};

/// What the campaigners share, to count what happened.
#[derive(Default)]
struct Counts {
    /// Jobs running now, and the most ever at once.
    running: AtomicUsize,
    most: AtomicUsize,
    /// Ticks of the job, and fenced writes refused.
    ticks: AtomicU64,
    refused: AtomicU64,
}

#[tokio::main]
async fn main() {
    let (url, _server) = support::example::or_exit(support::example::redis_for_example());
    if let Err(e) = run(&url).await {
        eprintln!("election example failed: {e}");
        std::process::exit(1);
    }
}

/// One campaigner: campaign, run the job while leading, campaign again.
async fn campaigner(id: usize, manager: LockManager, counts: Arc<Counts>) -> Result<(), LockError> {
    let election = manager.election("nightly-singleton");
    loop {
        let lead = election.campaign().await?;
        println!("campaigner {id} leads, term {}", lead.term());
        let job = async {
            let now = counts.running.fetch_add(1, Ordering::SeqCst) + 1;
            counts.most.fetch_max(now, Ordering::SeqCst);
            // Decrements when the job ends, however it ends (dropped by scope or the abort).
            let _running = Running(&counts.running);
            loop {
                let tick = counts.ticks.fetch_add(1, Ordering::SeqCst);
                if !lead
                    .fenced_set("{nightly-singleton}:progress", tick.to_string())
                    .await?
                {
                    counts.refused.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            #[allow(unreachable_code)]
            Ok::<(), LockError>(())
        };
        match lead.scope(job).await {
            Ok(res) => res?,
            Err(e) => println!("campaigner {id} stops: {e}"),
        }
    }
}

struct Running<'a>(&'a AtomicUsize);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn run(url: &str) -> Result<(), LockError> {
    let counts = Arc::new(Counts::default());
    let config = || Config::new(url).watchdog_timeout(Duration::from_secs(3));
    let mut managers = Vec::new();
    let mut tasks = Vec::new();
    for id in 0..3 {
        let manager = LockManager::start(config()).await?;
        managers.push(manager.clone());
        tasks.push(Some(tokio::spawn(campaigner(id, manager, counts.clone()))));
    }
    let observer_manager = LockManager::start(config()).await?;
    let election = observer_manager
        .election("nightly-singleton")
        .observe_every(Duration::from_millis(10));
    for _kill in 0..2 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let Some(leader) = election.leader().await? else {
            continue;
        };
        // The leader's manager is the one whose client id begins its holder id.
        let Some(i) = managers
            .iter()
            .position(|m| leader.holder.starts_with(&m.client_id().to_string()))
        else {
            continue;
        };
        let killed = Instant::now();
        if let Some(task) = tasks[i].take() {
            task.abort();
        }
        println!("killed campaigner {i} (term {})", leader.term);
        let mut observer = election.observe();
        loop {
            match observer.next().await? {
                Some(next) if next.term > leader.term => {
                    println!(
                        "term {} began {:?} after the kill",
                        next.term,
                        killed.elapsed()
                    );
                    break;
                }
                _ => {}
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for task in tasks.into_iter().flatten() {
        task.abort();
    }
    for manager in managers {
        manager.shutdown().await;
    }
    observer_manager.shutdown().await;
    let most = counts.most.load(Ordering::SeqCst);
    let refused = counts.refused.load(Ordering::SeqCst);
    println!(
        "job ticks: {}; most jobs at once: {most}; stale writes refused: {refused}",
        counts.ticks.load(Ordering::SeqCst)
    );
    if most != 1 {
        eprintln!("{most} jobs ran at once");
        std::process::exit(1);
    }
    Ok(())
}
