//! Synchronizers beside their raw floor, in one run, against one throwaway redis-server:
//!
//! 1. **Uncontended permit acquire+release**, one task: lockman's `PermitSemaphore` (renewed
//!    permit) and `Semaphore`, beside redis-rs alone running the same two scripts (lockman's
//!    own, with their request latch) by EVALSHA on a `ConnectionManager`; inside an actix System
//!    and from plain tokio, each beside the raw loop on the same runtime.
//! 2. **A semaphore of 8 permits, 64 tasks**: acquire+release pairs per second through lockman
//!    (56 tasks waiting at any time, woken by messages), beside the floor: 8 raw tasks, one per
//!    permit, that never wait (the most 8 permits can give through these scripts).
//! 3. **Redis commands per wake-up, 1,000 local waiters**: one permit, 1,000 tasks each taking it
//!    once and giving it back; every command Redis ran (INFO commandstats) divided by the
//!    acquisitions. A herd (every release waking every waiter) would cost ~1,000 per wake-up.
//!
//! Medians of interleaved batches, and ratios. Run: `cargo bench --bench synchronizers`.

mod common {
    #[path = "../common/stats.rs"]
    pub mod stats;
}
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::stats;
use lockman::{LockManager, PermitSemaphore, Semaphore};
use redis::Script;
use redis::aio::ConnectionManager;

const BATCH: u32 = 200;
const BATCHES: usize = 15;

/// lockman's scripts, joined exactly as `src/protocol/sync.rs` joins them.
macro_rules! latched {
    ($($part:literal),+) => {
        LazyLock::new(|| Script::new(concat!(
            "local function body()\n",
            include_str!("../src/protocol/sync/counter.lua"),
            $(include_str!($part),)+
            "end\n",
            include_str!("../src/protocol/sync/latch.lua")
        )))
    };
}
static PERMIT_ACQUIRE: LazyLock<Script> = latched!(
    "../src/protocol/sync/permit_reclaim.lua",
    "../src/protocol/sync/permit_acquire.lua"
);
static PERMIT_RELEASE: LazyLock<Script> = latched!(
    "../src/protocol/sync/permit_reclaim.lua",
    "../src/protocol/sync/permit_release.lua"
);
static SEM_ACQUIRE: LazyLock<Script> = latched!("../src/protocol/sync/semaphore_acquire.lua");
static SEM_RELEASE: LazyLock<Script> = latched!("../src/protocol/sync/semaphore_release.lua");

static REQUEST: AtomicU64 = AtomicU64::new(1);

/// The raw permit semaphore pair: acquire one permit (id made here), release it.
async fn raw_permit_pair(conn: &ConnectionManager, name: &str, lane: &str) -> bool {
    let (set, channel) = (
        format!("{{{name}}}:timeout"),
        format!("redisson_sc:{{{name}}}"),
    );
    let latch = format!("redisson_unlock_latch:{{{name}}}:{lane}");
    let id: [u8; 16] = *uuid::Uuid::new_v4().as_bytes();
    let taken: Vec<i64> = PERMIT_ACQUIRE
        .key(name)
        .key(&set)
        .key(&channel)
        .key(&latch)
        .arg("publish")
        .arg(1)
        .arg(30_000)
        .arg(&id[..])
        .arg(REQUEST.fetch_add(1, Ordering::Relaxed))
        .arg(40_000)
        .invoke_async(&mut conn.clone())
        .await
        .expect("acquire");
    if taken.first() != Some(&1) {
        return false;
    }
    let _: Vec<i64> = PERMIT_RELEASE
        .key(name)
        .key(&set)
        .key(&channel)
        .key(&latch)
        .arg("publish")
        .arg(&id[..])
        .arg(REQUEST.fetch_add(1, Ordering::Relaxed))
        .arg(40_000)
        .invoke_async(&mut conn.clone())
        .await
        .expect("release");
    true
}

/// The raw semaphore pair.
async fn raw_semaphore_pair(conn: &ConnectionManager, name: &str, lane: &str) -> bool {
    let channel = format!("redisson_sc:{{{name}}}");
    let latch = format!("redisson_unlock_latch:{{{name}}}:{lane}");
    let taken: Vec<i64> = SEM_ACQUIRE
        .key(name)
        .key(&latch)
        .arg(1)
        .arg(REQUEST.fetch_add(1, Ordering::Relaxed))
        .arg(40_000)
        .invoke_async(&mut conn.clone())
        .await
        .expect("acquire");
    if taken.first() != Some(&1) {
        return false;
    }
    let _: Vec<i64> = SEM_RELEASE
        .key(name)
        .key(&channel)
        .key(&latch)
        .arg(1)
        .arg("publish")
        .arg(REQUEST.fetch_add(1, Ordering::Relaxed))
        .arg(40_000)
        .invoke_async(&mut conn.clone())
        .await
        .expect("release");
    true
}

async fn permit_once(sem: &PermitSemaphore) {
    sem.acquire(1)
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
}

async fn semaphore_once(sem: &Semaphore) {
    sem.acquire(1)
        .await
        .expect("acquire")
        .release()
        .await
        .expect("release");
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// 1. Uncontended, on both runtimes.
fn uncontended(url: &str) {
    let rt = stats::tokio_runtime();
    let client = || redis::Client::open(url).expect("url");
    let raw = rt.block_on(ConnectionManager::new(client())).expect("raw");
    let tokio_mgr = rt.block_on(LockManager::connect(url)).expect("manager");
    let (tp, ts) = (tokio_mgr.permit_semaphore("tp"), tokio_mgr.semaphore("ts"));
    let actix = actix_rt::System::new();
    let raw_actix = actix
        .block_on(ConnectionManager::new(client()))
        .expect("raw");
    let actix_mgr = actix.block_on(LockManager::connect(url)).expect("manager");
    let (ap, asem) = (actix_mgr.permit_semaphore("ap"), actix_mgr.semaphore("as"));
    let mut setup = redis::Client::open(url).unwrap().get_connection().unwrap();
    for name in ["tp", "ts", "ap", "as", "rp", "rs"] {
        let _: () = redis::cmd("SET")
            .arg(name)
            .arg(1)
            .query(&mut setup)
            .unwrap();
    }
    let mut rows: Vec<(&str, Vec<Duration>)> = [
        "raw permit (tokio)",
        "lockman permit (tokio)",
        "raw permit (actix)",
        "lockman permit (actix)",
        "raw semaphore (tokio)",
        "lockman semaphore (tokio)",
        "raw semaphore (actix)",
        "lockman semaphore (actix)",
    ]
    .into_iter()
    .map(|n| (n, Vec::new()))
    .collect();
    let batch = |f: &dyn Fn() -> Duration| f() / BATCH;
    for _ in 0..BATCHES {
        let n = BATCH.into();
        rows[0].1.push(batch(&|| {
            rt.block_on(stats::timed(n, || async {
                assert!(raw_permit_pair(&raw, "rp", "t").await)
            }))
        }));
        rows[1]
            .1
            .push(batch(&|| rt.block_on(stats::timed(n, || permit_once(&tp)))));
        rows[2].1.push(batch(&|| {
            actix.block_on(stats::timed(n, || async {
                assert!(raw_permit_pair(&raw_actix, "rp", "a").await)
            }))
        }));
        rows[3].1.push(batch(&|| {
            actix.block_on(stats::timed(n, || permit_once(&ap)))
        }));
        rows[4].1.push(batch(&|| {
            rt.block_on(stats::timed(n, || async {
                assert!(raw_semaphore_pair(&raw, "rs", "t").await)
            }))
        }));
        rows[5].1.push(batch(&|| {
            rt.block_on(stats::timed(n, || semaphore_once(&ts)))
        }));
        rows[6].1.push(batch(&|| {
            actix.block_on(stats::timed(n, || async {
                assert!(raw_semaphore_pair(&raw_actix, "rs", "a").await)
            }))
        }));
        rows[7].1.push(batch(&|| {
            actix.block_on(stats::timed(n, || semaphore_once(&asem)))
        }));
    }
    let medians: Vec<f64> = rows
        .iter()
        .map(|(_, v)| us(stats::median(v.clone())))
        .collect();
    println!(
        "\n1. uncontended acquire+release, median of {BATCHES} interleaved batches of {BATCH}:"
    );
    for pair in 0..4 {
        let (raw, ours) = (medians[2 * pair], medians[2 * pair + 1]);
        println!(
            "  {:<28} {raw:>7.1} µs   {:<28} {ours:>7.1} µs   ratio {:.2}",
            rows[2 * pair].0,
            rows[2 * pair + 1].0,
            ours / raw
        );
    }
    rt.block_on(tokio_mgr.shutdown());
    actix.block_on(actix_mgr.shutdown());
}

/// 2. Throughput: 64 lockman tasks on 8 permits, beside 8 raw tasks that never wait.
fn throughput(url: &str) {
    let actix = actix_rt::System::new();
    let mgr = actix.block_on(LockManager::connect(url)).expect("manager");
    let raw = actix
        .block_on(ConnectionManager::new(redis::Client::open(url).unwrap()))
        .expect("raw");
    let mut setup = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("SET")
        .arg("pool")
        .arg(8)
        .query(&mut setup)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("rawpool")
        .arg(8)
        .query(&mut setup)
        .unwrap();
    let window = Duration::from_millis(1500);
    let (mut ours, mut floor) = (Vec::new(), Vec::new());
    for _ in 0..7 {
        let done = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        actix.block_on(async {
            let tasks: Vec<_> = (0..64)
                .map(|_| {
                    let (sem, done) = (mgr.semaphore("pool"), done.clone());
                    actix_rt::spawn(async move {
                        while started.elapsed() < window {
                            semaphore_once(&sem).await;
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        ours.push(done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64());
        let done = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        actix.block_on(async {
            let tasks: Vec<_> = (0..8)
                .map(|i| {
                    let (raw, done) = (raw.clone(), done.clone());
                    actix_rt::spawn(async move {
                        let lane = format!("raw{i}");
                        while started.elapsed() < window {
                            assert!(raw_semaphore_pair(&raw, "rawpool", &lane).await);
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        floor.push(done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64());
    }
    let (ours, floor) = (stats::median(ours), stats::median(floor));
    println!(
        "\n2. a semaphore of 8 permits, pairs per second, median of 7 interleaved windows of {window:?}:"
    );
    println!(
        "  raw, 8 tasks never waiting {floor:>9.0}/s   lockman, 64 tasks {ours:>9.0}/s   ratio {:.2}",
        ours / floor
    );
    actix.block_on(mgr.shutdown());
}

/// Script calls sent (EVALSHA) and every command Redis ran, scripts' own included, since the
/// last CONFIG RESETSTAT.
fn commands(raw: &mut redis::Connection) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("commandstats").query(raw).unwrap();
    let calls = |prefix: &str| -> u64 {
        info.lines()
            .filter(|l| l.starts_with(prefix) && !l.starts_with("cmdstat_info:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    };
    (calls("cmdstat_evalsha:"), calls("cmdstat_"))
}

/// 3. Redis commands per wake-up with 1,000 local waiters: woken by messages (another process
///    releases `k` permits at a time), and passed between local tasks (hand-offs).
fn commands_per_wakeup(url: &str, server: &support::RedisServer) {
    let actix = actix_rt::System::new();
    let (a, b) = actix.block_on(async {
        (
            LockManager::connect(url).await.expect("manager"),
            LockManager::connect(url).await.expect("manager"),
        )
    });
    let mut raw = server.conn();
    let waiters: u32 = 1000;
    println!("\n3. Redis commands per wake-up, 1,000 local waiters:");
    for k in [1u32, 10, 100] {
        let name = format!("herd{k}");
        let _: () = redis::cmd("SET").arg(&name).arg(0).query(&mut raw).unwrap();
        let ((sent, all), took) = actix.block_on(async {
            let sem = a.semaphore(name.as_str());
            // Each waiter keeps what it gets: only messages wake them.
            let tasks: Vec<_> = (0..waiters)
                .map(|_| {
                    let sem = sem.clone();
                    actix_rt::spawn(async move { sem.acquire(1).await.unwrap().forget() })
                })
                .collect();
            tokio::time::sleep(Duration::from_secs(2)).await;
            support::commands::reset_stats(&mut raw);
            let started = Instant::now();
            let releaser = b.semaphore(name.as_str());
            for _ in 0..waiters / k {
                releaser.release(k).await.unwrap();
            }
            for t in tasks {
                t.await.unwrap();
            }
            let took = started.elapsed();
            (commands(&mut raw), took)
        });
        let per = |n: u64| n as f64 / f64::from(waiters);
        println!(
            "  another process releases {k:>3} at a time: {sent} script calls ({:.2} per wake-up), {all} commands with the scripts' own ({:.2}), {:.0} ms",
            per(sent),
            per(all),
            took.as_secs_f64() * 1e3
        );
    }
    // Local tasks passing one permit: each takes it once and gives it back.
    let _: () = redis::cmd("SET")
        .arg("local")
        .arg(1)
        .query(&mut raw)
        .unwrap();
    let ((sent, all), took) = actix.block_on(async {
        let sem = a.semaphore("local");
        let holder = sem.acquire(1).await.unwrap();
        let tasks: Vec<_> = (0..waiters)
            .map(|_| {
                let sem = sem.clone();
                actix_rt::spawn(async move { semaphore_once(&sem).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(2)).await;
        support::commands::reset_stats(&mut raw);
        let started = Instant::now();
        holder.release().await.unwrap();
        for t in tasks {
            t.await.unwrap();
        }
        (commands(&mut raw), started.elapsed())
    });
    println!(
        "  local tasks passing one permit:          {sent} script calls ({:.2} per wake-up), {all} commands with the scripts' own ({:.2}), {:.0} ms",
        sent as f64 / f64::from(waiters),
        all as f64 / f64::from(waiters),
        took.as_secs_f64() * 1e3
    );
    actix.block_on(async {
        a.shutdown().await;
        b.shutdown().await;
    });
}

fn main() {
    let server = support::RedisServer::start();
    let url = server.url();
    uncontended(&url);
    throughput(&url);
    commands_per_wakeup(&url, &server);
}
