//! The uncontended comparison shared by `benches/uncontended.rs` (plain TCP) and
//! `benches/tls.rs` (TLS): one acquire + release at a time through lockman, beside redis-rs
//! alone running the same two scripts by EVALSHA on a `ConnectionManager`, on a plain tokio
//! runtime and inside an actix System, each lockman figure beside the raw loop on the same
//! runtime. Criterion reports each; the closing table gives medians of interleaved batches.
#![allow(dead_code)]

use std::time::Duration;

use criterion::Criterion;
use lockman::{Config, LockManager};
use redis::aio::ConnectionManager;

use super::raw;
use super::stats::{self, lockman_once, timed};

const BATCH: u32 = 200;
const BATCHES: usize = 25;

async fn raw_once(conn: &ConnectionManager) {
    raw::pair(conn, "raw", "00000000-0000-4000-8000-000000000000:1").await;
}

/// Runs the comparison: `client` makes the raw side's connections, `config` lockman's.
pub fn uncontended(title: &str, client: impl Fn() -> redis::Client, config: impl Fn() -> Config) {
    let rt = stats::tokio_runtime();
    let raw = rt.block_on(raw::connect_client(client()));
    let tokio_lock = rt.block_on(async {
        let manager = LockManager::start(config()).await.expect("manager");
        manager.lock("tokio")
    });
    // Created after the tokio manager: an actix System makes this thread's arbiter its own.
    let actix = actix_rt::System::new();
    let raw_actix = actix.block_on(raw::connect_client(client()));
    let actix_mgr = actix
        .block_on(LockManager::start(config()))
        .expect("manager");
    let actix_lock = actix_mgr.lock("actix");

    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    {
        let mut group = c.benchmark_group(title);
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

    // Interleaved batches, so that noise hits all four alike; medians of batch means.
    let (mut r, mut t, mut ra, mut a) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..BATCHES {
        r.push(rt.block_on(timed(BATCH.into(), || raw_once(&raw))) / BATCH);
        ra.push(actix.block_on(timed(BATCH.into(), || raw_once(&raw_actix))) / BATCH);
        t.push(rt.block_on(timed(BATCH.into(), || lockman_once(&tokio_lock))) / BATCH);
        a.push(actix.block_on(timed(BATCH.into(), || lockman_once(&actix_lock))) / BATCH);
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (r, t, ra, a) = (
        us(stats::median(r)),
        us(stats::median(t)),
        us(stats::median(ra)),
        us(stats::median(a)),
    );
    println!("\n{title}, median of {BATCHES} interleaved batches of {BATCH}:");
    println!(
        "  tokio runtime:  raw {r:>7.1} µs   lockman {t:>7.1} µs   ratio {:.2}",
        t / r
    );
    println!(
        "  actix system:   raw {ra:>7.1} µs   lockman {a:>7.1} µs   ratio {:.2}",
        a / ra
    );
}
