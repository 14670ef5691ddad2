//! Uncontended acquire + release, one task, one name: lockman beside the floor, a raw redis-rs
//! loop running the same two scripts by EVALSHA on the same kind of connection
//! (`ConnectionManager`), against the same throwaway redis-server, in the same run.
//!
//! lockman is measured twice: called from plain tokio (its actors then run on a System of its
//! own, on another thread), and from inside an actix System (actors on the caller's thread).
//! Each is compared with the raw loop on the same kind of runtime (a tokio current-thread
//! runtime, the actix System's): the two runtimes differ by several percent on their own.
//! Criterion reports each; the closing table gives medians of interleaved batches and ratios.
//!
//! Run: `cargo bench --bench uncontended` (starts its own redis-server).

#[path = "common/raw.rs"]
mod raw;
#[path = "common/stats.rs"]
mod stats;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use criterion::Criterion;
use lockman::LockManager;
use redis::aio::ConnectionManager;
use stats::{lockman_once, timed};

const BATCH: u32 = 200;
const BATCHES: usize = 25;

async fn raw_once(conn: &ConnectionManager) {
    raw::pair(conn, "raw", "00000000-0000-4000-8000-000000000000:1").await;
}

fn main() {
    let server = support::RedisServer::start();
    let url = server.url();
    let rt = stats::tokio_runtime();
    let raw = rt.block_on(raw::connect(&url));
    let tokio_lock = rt.block_on(async {
        LockManager::connect(&url)
            .await
            .expect("manager")
            .lock("tokio")
    });
    // Created after the tokio manager: an actix System makes this thread's arbiter its own.
    let actix = actix_rt::System::new();
    let raw_actix = actix.block_on(raw::connect(&url));
    let actix_mgr = actix.block_on(LockManager::connect(&url)).expect("manager");
    let actix_lock = actix_mgr.lock("actix");

    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    {
        let mut group = c.benchmark_group("uncontended acquire+release");
        group.bench_function("raw evalsha x2", |b| {
            b.iter_custom(|iters| rt.block_on(timed(iters, || raw_once(&raw))))
        });
        group.bench_function("lockman from tokio", |b| {
            b.iter_custom(|iters| rt.block_on(timed(iters, || lockman_once(&tokio_lock))))
        });
        group.bench_function("raw evalsha x2 in actix system", |b| {
            b.iter_custom(|iters| actix.block_on(timed(iters, || raw_once(&raw_actix))))
        });
        group.bench_function("lockman in actix system", |b| {
            b.iter_custom(|iters| actix.block_on(timed(iters, || lockman_once(&actix_lock))))
        });
        group.finish();
    }
    c.final_summary();

    // Interleaved batches, so that noise hits all three alike; medians of batch means.
    let (mut r, mut t, mut ra, mut a) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..BATCHES {
        r.push(rt.block_on(timed(BATCH.into(), || raw_once(&raw))) / BATCH);
        ra.push(actix.block_on(timed(BATCH.into(), || raw_once(&raw_actix))) / BATCH);
        t.push(rt.block_on(timed(BATCH.into(), || lockman_once(&tokio_lock))) / BATCH);
        a.push(actix.block_on(timed(BATCH.into(), || lockman_once(&actix_lock))) / BATCH);
    }
    let (r, t, ra, a) = (
        stats::median(r),
        stats::median(t),
        stats::median(ra),
        stats::median(a),
    );
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("\nuncontended acquire+release, median of {BATCHES} interleaved batches of {BATCH}:");
    println!(
        "  tokio runtime:  raw {:>7.1} µs   lockman {:>7.1} µs   ratio {:.2}",
        us(r),
        us(t),
        us(t) / us(r)
    );
    println!(
        "  actix system:   raw {:>7.1} µs   lockman {:>7.1} µs   ratio {:.2}",
        us(ra),
        us(a),
        us(a) / us(ra)
    );
    drop(server);
}
