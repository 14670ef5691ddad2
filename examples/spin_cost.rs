//! What a hand-off costs Redis when many clients wait on one name, per lock kind: the figures
//! behind BENCHMARKS.md's "Spin lock". For each kind (plain, fair, spin) and each number of
//! waiting clients W, W + 1 clients (each a `LockManager` of its own: its own client id,
//! connections and subscription, as a process would have; all in this process) run one task
//! each, taking the lock `hot`, holding it HOLD ms, releasing it and waiting HOLD ms, until ACQUISITIONS
//! acquisitions were made; a fresh throwaway redis-server per run. Redis's own count of EVALSHA
//! calls (`INFO commandstats`) over the run, less what the same clients run idle for as long
//! (client records; measured before the run over 2 s), divided by the acquisitions: script
//! calls per acquisition (one acquisition is one hand-off), and PUBLISH calls per acquisition
//! (Redis counts those its scripts make).
//!
//! Run: `cargo run --release --example spin_cost -- [WAITING,...] [ACQUISITIONS] [HOLD_MS]`
//! (defaults: `1,10,40,100 300 5`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockman::{Config, LockManager};

fn calls(conn: &mut redis::Connection, command: &str) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO");
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[derive(Clone, Copy)]
enum Kind {
    Plain,
    Fair,
    Spin,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Fair => "fair",
            Kind::Spin => "spin",
        }
    }

    fn lock(self, manager: &LockManager) -> lockman::Lock {
        match self {
            Kind::Plain => manager.lock("hot"),
            Kind::Fair => (*manager.fair_lock("hot")).clone(),
            Kind::Spin => manager.spin_lock("hot"),
        }
    }
}

struct Run {
    scripts: f64,
    publishes: f64,
    per_second: f64,
    background: u64,
}

async fn run(kind: Kind, waiting: usize, acquisitions: u64, hold: Duration) -> Run {
    let server = support::RedisServer::start();
    let mut conn = server.conn();
    let mut managers = Vec::new();
    for _ in 0..=waiting {
        managers.push(
            LockManager::start(Config::new(server.url()))
                .await
                .expect("manager"),
        );
    }
    // Warm-up: each client takes the lock once (scripts loaded, actors started).
    for m in &managers {
        kind.lock(m)
            .acquire()
            .await
            .expect("acquire")
            .release()
            .await
            .expect("release");
    }
    let idle = Duration::from_secs(2);
    let before = calls(&mut conn, "evalsha");
    tokio::time::sleep(idle).await;
    let background = calls(&mut conn, "evalsha") - before;

    let (evalsha, publish) = (calls(&mut conn, "evalsha"), calls(&mut conn, "publish"));
    let count = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for m in &managers {
        let (lock, count) = (kind.lock(m), count.clone());
        tasks.push(tokio::spawn(async move {
            while count.load(Ordering::SeqCst) < acquisitions {
                let guard = lock.acquire().await.expect("acquire");
                count.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(hold).await;
                guard.release().await.expect("release");
                // Work between holds, as a client has: without it a spin lock's releaser takes
                // it straight back (it is not fair) and the others' polls go unanswered.
                tokio::time::sleep(hold).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let elapsed = started.elapsed();
    let made = count.load(Ordering::SeqCst) as f64;
    let scripts = (calls(&mut conn, "evalsha") - evalsha) as f64
        - background as f64 * elapsed.as_secs_f64() / idle.as_secs_f64();
    let publishes = (calls(&mut conn, "publish") - publish) as f64;
    for m in managers {
        m.shutdown().await;
    }
    Run {
        scripts: scripts / made,
        publishes: publishes / made,
        per_second: made / elapsed.as_secs_f64(),
        background,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let waiting: Vec<usize> = args
        .first()
        .map(|a| a.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 10, 40, 100]);
    let acquisitions: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(300);
    let hold = Duration::from_millis(args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "Script calls per acquisition, {acquisitions} acquisitions, hold {hold:?} then as long between holds, one task per client:"
    );
    println!(
        "| waiting clients | kind | EVALSHA per acquisition | PUBLISH per acquisition | acquisitions/s | idle EVALSHA in 2 s (subtracted) |"
    );
    println!("|---|---|---|---|---|---|");
    for &w in &waiting {
        for kind in [Kind::Plain, Kind::Fair, Kind::Spin] {
            let r = rt.block_on(run(kind, w, acquisitions, hold));
            println!(
                "| {w} | {} | {:.2} | {:.2} | {:.0} | {} |",
                kind.label(),
                r.scripts,
                r.publishes,
                r.per_second,
                r.background
            );
        }
    }
}
