//! RedLock acquisition over 5 independent redis-servers: lockman's RedLock, which attempts the
//! members concurrently, beside the same five members attempted one after another (as Redisson
//! does), in the same run against the same servers. One uncontended try_acquire + release each.
//!
//! Run: `cargo bench --bench redlock` (starts its own five redis-servers).

#[path = "common/stats.rs"]
mod stats;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use criterion::Criterion;
use lockman::{Lock, LockManager, RedLock};

const BATCH: u32 = 100;
const BATCHES: usize = 25;

/// The members one after another: acquire each, then release each.
async fn sequential(members: &[Lock]) {
    let mut guards = Vec::new();
    for m in members {
        guards.push(m.try_acquire().await.expect("acquire").expect("free"));
    }
    for g in guards {
        g.release().await.expect("release");
    }
}

async fn concurrent(red: &RedLock) {
    red.try_acquire()
        .await
        .expect("acquire")
        .expect("free")
        .release()
        .await
        .expect("release");
}

fn main() {
    let servers: Vec<_> = (0..5).map(|_| support::RedisServer::start()).collect();
    let actix = actix_rt::System::new();
    let (red, members) = actix.block_on(async {
        let mut managers = Vec::new();
        for s in &servers {
            managers.push(LockManager::connect(&s.url()).await.expect("manager"));
        }
        let red = RedLock::new(managers.iter().map(|m| m.lock("bench:red")).collect());
        let members: Vec<Lock> = managers.iter().map(|m| m.lock("bench:seq")).collect();
        (red, members)
    });

    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    {
        let mut group = c.benchmark_group("redlock over 5 servers: try_acquire + release");
        group.bench_function("sequential members", |b| {
            b.iter_custom(|iters| {
                actix.block_on(async {
                    let t = Instant::now();
                    for _ in 0..iters {
                        sequential(&members).await;
                    }
                    t.elapsed()
                })
            })
        });
        group.bench_function("lockman RedLock (concurrent)", |b| {
            b.iter_custom(|iters| {
                actix.block_on(async {
                    let t = Instant::now();
                    for _ in 0..iters {
                        concurrent(&red).await;
                    }
                    t.elapsed()
                })
            })
        });
        group.finish();
    }
    c.final_summary();

    let (mut seq, mut con) = (Vec::new(), Vec::new());
    for _ in 0..BATCHES {
        seq.push(actix.block_on(async {
            let t = Instant::now();
            for _ in 0..BATCH {
                sequential(&members).await;
            }
            t.elapsed() / BATCH
        }));
        con.push(actix.block_on(async {
            let t = Instant::now();
            for _ in 0..BATCH {
                concurrent(&red).await;
            }
            t.elapsed() / BATCH
        }));
    }
    let (seq, con) = (stats::median(seq), stats::median(con));
    println!(
        "\nredlock over 5 servers, try_acquire + release, median of {BATCHES} batches of {BATCH}:"
    );
    println!(
        "  sequential members   {:>8.1} µs   1.00",
        seq.as_secs_f64() * 1e6
    );
    println!(
        "  concurrent (lockman) {:>8.1} µs   {:.2}",
        con.as_secs_f64() * 1e6,
        con.as_secs_f64() / seq.as_secs_f64()
    );
}
