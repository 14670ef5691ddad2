//! The uncontended comparison shared by `benches/uncontended.rs` (plain TCP) and
//! `benches/tls.rs` (TLS): one acquire + release at a time through lockman, beside redis-rs
//! alone running the same two scripts by EVALSHA on a `ConnectionManager`, on a plain tokio
//! runtime and inside an actix System, each lockman figure beside the raw loop on the same
//! runtime. Criterion reports each; the closing table gives medians of interleaved batches:
//! in a tight loop, and with the name idle between pairs (the caller yields once after each
//! pair, as a request handler's lock is idle between requests), each against two floors:
//! `ScriptInvocation` (redis-rs's usual way) and one presized `Cmd` (its cheapest). A third
//! pattern makes the handle per request, as a web handler does (`manager.lock(name)`, then the
//! pair, the name idle between requests): the table's `request` rows.
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

async fn raw_cmd_once(conn: &ConnectionManager) {
    let holder = "00000000-0000-4000-8000-000000000000:2";
    raw::pair_cmd(conn, "rawc", "redisson_lock__channel:{rawc}", holder).await;
}

/// `op`, then one yield: the name is idle for a moment between pairs.
async fn idle_after<F: std::future::Future<Output = ()>>(op: F) {
    op.await;
    tokio::task::yield_now().await;
}

/// A request handler's pair: a handle made for the request, then acquire and release.
async fn per_request(manager: &LockManager, name: &str) {
    lockman_once(&manager.lock(name)).await;
}

/// Runs the comparison: `client` makes the raw side's connections, `config` lockman's.
pub fn uncontended(title: &str, client: impl Fn() -> redis::Client, config: impl Fn() -> Config) {
    let rt = stats::tokio_runtime();
    let raw = rt.block_on(raw::connect_client(client()));
    let tokio_mgr = rt.block_on(LockManager::start(config())).expect("manager");
    let tokio_lock = tokio_mgr.lock("tokio");
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

    rt.block_on(raw::load(&raw));
    actix.block_on(raw::load(&raw_actix));
    // Interleaved batches, so that noise hits every series alike; medians of batch means.
    // Series: raw, raw as one Cmd, lockman; each tight and idle between pairs; on both runtimes.
    let mut series = vec![Vec::new(); 18];
    let n = u64::from(BATCH);
    for _ in 0..BATCHES {
        let tokio_side = [
            rt.block_on(timed(n, || raw_once(&raw))),
            rt.block_on(timed(n, || raw_cmd_once(&raw))),
            rt.block_on(timed(n, || lockman_once(&tokio_lock))),
            rt.block_on(timed(n, || idle_after(raw_once(&raw)))),
            rt.block_on(timed(n, || idle_after(raw_cmd_once(&raw)))),
            rt.block_on(timed(n, || idle_after(lockman_once(&tokio_lock)))),
            rt.block_on(timed(n, || idle_after(raw_once(&raw)))),
            rt.block_on(timed(n, || idle_after(raw_cmd_once(&raw)))),
            rt.block_on(timed(n, || idle_after(per_request(&tokio_mgr, "tokio-r")))),
        ];
        let actix_side = [
            actix.block_on(timed(n, || raw_once(&raw_actix))),
            actix.block_on(timed(n, || raw_cmd_once(&raw_actix))),
            actix.block_on(timed(n, || lockman_once(&actix_lock))),
            actix.block_on(timed(n, || idle_after(raw_once(&raw_actix)))),
            actix.block_on(timed(n, || idle_after(raw_cmd_once(&raw_actix)))),
            actix.block_on(timed(n, || idle_after(lockman_once(&actix_lock)))),
            actix.block_on(timed(n, || idle_after(raw_once(&raw_actix)))),
            actix.block_on(timed(n, || idle_after(raw_cmd_once(&raw_actix)))),
            actix.block_on(timed(n, || idle_after(per_request(&actix_mgr, "actix-r")))),
        ];
        for (i, d) in tokio_side.into_iter().chain(actix_side).enumerate() {
            series[i].push(d / BATCH);
        }
    }
    let m: Vec<f64> = series
        .into_iter()
        .map(|s| stats::median(s).as_secs_f64() * 1e6)
        .collect();
    println!("\n{title}, median of {BATCHES} interleaved batches of {BATCH} (µs per pair):");
    println!("  runtime  pattern     raw    raw Cmd   lockman   ÷ raw   ÷ raw Cmd");
    let rows = [
        ("tokio", "tight"),
        ("tokio", "idle"),
        ("tokio", "request"),
        ("actix", "tight"),
        ("actix", "idle"),
        ("actix", "request"),
    ];
    for (i, (runtime, pattern)) in rows.into_iter().enumerate() {
        let (r, c, l) = (m[3 * i], m[3 * i + 1], m[3 * i + 2]);
        println!(
            "  {runtime:<8} {pattern:<8} {r:>7.1}  {c:>7.1}  {l:>8.1}   {:>5.2}   {:>5.2}",
            l / r,
            l / c
        );
    }
}
