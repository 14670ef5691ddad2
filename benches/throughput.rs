//! Throughput: 64 tasks on 64 names, each looping acquire + release, through one manager;
//! beside the floor, 64 tasks looping the same two scripts by EVALSHA on one multiplexed
//! connection (`ConnectionManager`, the kind lockman uses), against the same throwaway
//! redis-server, in the same run.
//!
//! Both sides run their 64 loops as concurrent futures of one task, measured twice: inside an
//! actix System (lockman's actors on the caller's thread), and on a tokio current-thread runtime
//! (lockman's actors on its own System thread). Criterion reports acquire+release pairs per
//! second; the closing table gives medians of interleaved batches and the ratio lockman / raw.
//!
//! Run: `cargo bench --bench throughput` (starts its own redis-server).

#[path = "common/raw.rs"]
mod raw;
#[path = "common/stats.rs"]
mod stats;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use futures_util::future::join_all;
use lockman::{Lock, LockManager};
use redis::aio::ConnectionManager;

const TASKS: usize = 64;
/// Loops per task in one interleaved batch.
const BATCH: u64 = 100;
const BATCHES: usize = 31;

/// 64 loops of `iters` raw acquire + release pairs, each on its own name.
async fn raw_run(conn: &ConnectionManager, iters: u64) -> Duration {
    let start = Instant::now();
    join_all((0..TASKS).map(|t| async move {
        let (name, holder) = (format!("raw:{t}"), format!("raw-holder:{t}"));
        for _ in 0..iters {
            raw::pair(conn, &name, &holder).await;
        }
    }))
    .await;
    start.elapsed()
}

async fn lockman_run(locks: &[Lock], iters: u64) -> Duration {
    let start = Instant::now();
    join_all(locks.iter().map(|lock| async move {
        for _ in 0..iters {
            let guard = lock.acquire().await.expect("acquire");
            guard.release().await.expect("release");
        }
    }))
    .await;
    start.elapsed()
}

async fn locks(url: &str, prefix: &str) -> Vec<Lock> {
    let manager = LockManager::connect(url).await.expect("manager");
    (0..TASKS)
        .map(|t| manager.lock(format!("{prefix}:{t}")))
        .collect()
}

/// Pairs per second, from the run time of `iters` loops of every task.
fn rate(iters: u64, took: Duration) -> f64 {
    (iters * TASKS as u64) as f64 / took.as_secs_f64()
}

fn main() {
    let server = support::RedisServer::start();
    let url = server.url();
    let rt = stats::tokio_runtime();
    let raw = rt.block_on(raw::connect(&url));
    let tokio_locks = rt.block_on(locks(&url, "tokio"));
    // Created after the tokio manager: an actix System makes this thread's arbiter its own.
    let actix = actix_rt::System::new();
    let raw_actix = actix.block_on(raw::connect(&url));
    let actix_locks = actix.block_on(locks(&url, "actix"));

    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    {
        let mut group = c.benchmark_group("64 tasks on 64 names, acquire+release");
        group.throughput(Throughput::Elements(TASKS as u64));
        group.bench_function("raw evalsha x2 in actix system", |b| {
            b.iter_custom(|iters| actix.block_on(raw_run(&raw_actix, iters)))
        });
        group.bench_function("lockman in actix system", |b| {
            b.iter_custom(|iters| actix.block_on(lockman_run(&actix_locks, iters)))
        });
        group.bench_function("raw evalsha x2 on tokio", |b| {
            b.iter_custom(|iters| rt.block_on(raw_run(&raw, iters)))
        });
        group.bench_function("lockman from tokio", |b| {
            b.iter_custom(|iters| rt.block_on(lockman_run(&tokio_locks, iters)))
        });
        group.finish();
    }
    c.final_summary();

    // Interleaved batches, so that noise hits all four alike; medians of batch rates.
    let (mut ra, mut la, mut rt_, mut lt) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..BATCHES {
        ra.push(rate(BATCH, actix.block_on(raw_run(&raw_actix, BATCH))));
        la.push(rate(
            BATCH,
            actix.block_on(lockman_run(&actix_locks, BATCH)),
        ));
        rt_.push(rate(BATCH, rt.block_on(raw_run(&raw, BATCH))));
        lt.push(rate(BATCH, rt.block_on(lockman_run(&tokio_locks, BATCH))));
    }
    let (ra, la, rt_, lt) = (
        stats::median(ra),
        stats::median(la),
        stats::median(rt_),
        stats::median(lt),
    );
    println!(
        "\n{TASKS} tasks on {TASKS} names, acquire+release pairs per second, median of {BATCHES} \
         interleaved batches of {BATCH} loops per task:"
    );
    println!(
        "  actix system:  raw {ra:>8.0}/s   lockman {la:>8.0}/s   ratio {:.2}",
        la / ra
    );
    println!(
        "  tokio runtime: raw {rt_:>8.0}/s   lockman {lt:>8.0}/s   ratio {:.2}",
        lt / rt_
    );
    drop(server);
}
