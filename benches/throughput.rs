//! Throughput: 64 tasks on 64 names, each looping acquire + release, through one manager;
//! beside raw redis-rs, 64 tasks looping the same two scripts by EVALSHA on one multiplexed
//! connection (`ConnectionManager`, the kind lockman uses), and beside the design's floor, 64
//! tasks each exchanging `Acquire`/`Release` with its name's trivial actor that runs those
//! scripts (`common/floor.rs`), against the same throwaway redis-server, in the same run.
//!
//! All three run their 64 loops as concurrent futures of one task, measured twice: inside an
//! actix System (lockman's actors on the caller's thread), and on a tokio current-thread runtime
//! (lockman's actors, and the floor's, on a System thread of their own). Criterion reports
//! acquire+release pairs per second; the closing table gives medians of interleaved batches and
//! the ratios lockman / raw and lockman / floor.
//!
//! Run: `cargo bench --bench throughput` (starts its own redis-server).

#[path = "common/floor.rs"]
mod floor;
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

async fn floor_run(actors: &[actix::Addr<floor::Floor>], iters: u64) -> Duration {
    let start = Instant::now();
    join_all(actors.iter().map(|actor| async move {
        for _ in 0..iters {
            floor::pair(actor).await;
        }
    }))
    .await;
    start.elapsed()
}

/// The floor's 64 actors, one per name, in `floors`.
fn floor_actors(floors: &floor::Floors, prefix: &str) -> Vec<actix::Addr<floor::Floor>> {
    (0..TASKS)
        .map(|t| floors.actor(&format!("{prefix}:{t}")))
        .collect()
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
    let client = || redis::Client::open(url.as_str()).expect("valid url");
    let rt = stats::tokio_runtime();
    let raw = rt.block_on(raw::connect(&url));
    let tokio_locks = rt.block_on(locks(&url, "tokio"));
    let tokio_floors = floor_actors(&floor::Floors::on_own_thread(client()), "tokio-f");
    // Created after the tokio manager: an actix System makes this thread's arbiter its own.
    let actix = actix_rt::System::new();
    let raw_actix = actix.block_on(raw::connect(&url));
    let actix_locks = actix.block_on(locks(&url, "actix"));
    let actix_floors = floor_actors(&actix.block_on(floor::Floors::here(client())), "actix-f");

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
        group.bench_function("floor in actix system", |b| {
            b.iter_custom(|iters| actix.block_on(floor_run(&actix_floors, iters)))
        });
        group.bench_function("lockman in actix system", |b| {
            b.iter_custom(|iters| actix.block_on(lockman_run(&actix_locks, iters)))
        });
        group.bench_function("raw evalsha x2 on tokio", |b| {
            b.iter_custom(|iters| rt.block_on(raw_run(&raw, iters)))
        });
        group.bench_function("floor from tokio", |b| {
            b.iter_custom(|iters| rt.block_on(floor_run(&tokio_floors, iters)))
        });
        group.bench_function("lockman from tokio", |b| {
            b.iter_custom(|iters| rt.block_on(lockman_run(&tokio_locks, iters)))
        });
        group.finish();
    }
    c.final_summary();

    // Interleaved batches, so that noise hits all six alike; medians of batch rates.
    let mut series = vec![Vec::new(); 6];
    for _ in 0..BATCHES {
        let took = [
            actix.block_on(raw_run(&raw_actix, BATCH)),
            actix.block_on(floor_run(&actix_floors, BATCH)),
            actix.block_on(lockman_run(&actix_locks, BATCH)),
            rt.block_on(raw_run(&raw, BATCH)),
            rt.block_on(floor_run(&tokio_floors, BATCH)),
            rt.block_on(lockman_run(&tokio_locks, BATCH)),
        ];
        for (i, d) in took.into_iter().enumerate() {
            series[i].push(rate(BATCH, d));
        }
    }
    let m: Vec<f64> = series.into_iter().map(stats::median).collect();
    println!(
        "\n{TASKS} tasks on {TASKS} names, acquire+release pairs per second, median of {BATCHES} \
         interleaved batches of {BATCH} loops per task:"
    );
    for (row, runtime) in ["actix system: ", "tokio runtime:"].into_iter().enumerate() {
        let (r, f, l) = (m[3 * row], m[3 * row + 1], m[3 * row + 2]);
        println!(
            "  {runtime} raw {r:>8.0}/s   floor {f:>8.0}/s   lockman {l:>8.0}/s   \
             lockman÷raw {:.2}   lockman÷floor {:.2}   floor÷raw {:.2}",
            l / r,
            l / f,
            f / r
        );
    }
    drop(server);
}
