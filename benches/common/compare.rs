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
//!
//! Beside them, the design's floor (`floor.rs`, issue 60): a trivial actor per name running the
//! same scripts, reached through a kept address (tight, idle) or looked up per request
//! (request). Plain tokio is measured in both flavours a user's loop meets: a current-thread
//! runtime (the raw loop's connection runs on the caller's thread) and the multi-thread runtime
//! of `#[tokio::main]` (the caller runs in `block_on`, the raw connection's task on a worker
//! thread). lockman's actors, and the floor's, run on an actix System of their own on another
//! thread whenever the caller is not inside one.
#![allow(dead_code)]

use std::time::Duration;

use criterion::Criterion;
use lockman::{Config, LockManager};
use redis::aio::ConnectionManager;

use super::floor::{self, Floors};
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

/// The floor's request pair: the name's actor looked up in the directory, then the pair.
async fn floor_per_request(floors: &Floors, name: &str) {
    floor::pair(&floors.actor(name)).await;
}

/// What one runtime's side of the comparison measures with.
struct Side {
    raw: ConnectionManager,
    manager: LockManager,
    lock: lockman::Lock,
    floors: Floors,
    floor: actix::Addr<floor::Floor>,
    /// Names' prefix, one per side.
    tag: &'static str,
}

impl Side {
    /// Twelve series, in the table's order: tight, idle, request; each raw, raw Cmd, floor,
    /// lockman; one batch of each, one after another.
    async fn batch(&self) -> [Duration; 12] {
        let n = u64::from(BATCH);
        let (raw, manager, floors) = (&self.raw, &self.manager, &self.floors);
        let (lock, addr) = (&self.lock, &self.floor);
        let (request, floor_request) = (format!("{}-r", self.tag), format!("{}-fr", self.tag));
        let (request, floor_request) = (request.as_str(), floor_request.as_str());
        [
            timed(n, || raw_once(raw)).await,
            timed(n, || raw_cmd_once(raw)).await,
            timed(n, || floor::pair(addr)).await,
            timed(n, || lockman_once(lock)).await,
            timed(n, || idle_after(raw_once(raw))).await,
            timed(n, || idle_after(raw_cmd_once(raw))).await,
            timed(n, || idle_after(floor::pair(addr))).await,
            timed(n, || idle_after(lockman_once(lock))).await,
            timed(n, || idle_after(raw_once(raw))).await,
            timed(n, || idle_after(raw_cmd_once(raw))).await,
            timed(n, || idle_after(floor_per_request(floors, floor_request))).await,
            timed(n, || idle_after(per_request(manager, request))).await,
        ]
    }
}

/// One runtime's side, made on that runtime: the raw connection (its task runs where the
/// runtime spawns), a manager, a kept lock and a kept floor actor.
async fn side(
    client: &impl Fn() -> redis::Client,
    config: &impl Fn() -> Config,
    floors: Floors,
    tag: &'static str,
) -> Side {
    let raw = raw::connect_client(client()).await;
    raw::load(&raw).await;
    let manager = LockManager::start(config()).await.expect("manager");
    let lock = manager.lock(tag);
    let floor = floors.actor(&format!("{tag}-f"));
    Side {
        raw,
        manager,
        lock,
        floors,
        floor,
        tag,
    }
}

/// Criterion's part: the kept-handle pair, raw, floor and lockman, on the current-thread tokio
/// runtime and inside the actix System.
fn criterion_part(
    title: &str,
    rt: &tokio::runtime::Runtime,
    actix: &actix_rt::SystemRunner,
    tokio_side: &Side,
    actix_side: &Side,
) {
    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let mut group = c.benchmark_group(title);
    let (t, a) = (tokio_side, actix_side);
    group.bench_function("raw evalsha x2", |b| {
        b.iter_custom(|iters| rt.block_on(timed(iters, || raw_once(&t.raw))))
    });
    group.bench_function("floor from tokio", |b| {
        b.iter_custom(|iters| rt.block_on(timed(iters, || floor::pair(&t.floor))))
    });
    group.bench_function("lockman from tokio", |b| {
        b.iter_custom(|iters| rt.block_on(timed(iters, || lockman_once(&t.lock))))
    });
    group.bench_function("raw evalsha x2 in actix system", |b| {
        b.iter_custom(|iters| actix.block_on(timed(iters, || raw_once(&a.raw))))
    });
    group.bench_function("floor in actix system", |b| {
        b.iter_custom(|iters| actix.block_on(timed(iters, || floor::pair(&a.floor))))
    });
    group.bench_function("lockman in actix system", |b| {
        b.iter_custom(|iters| actix.block_on(timed(iters, || lockman_once(&a.lock))))
    });
    group.finish();
    c.final_summary();
}

/// The closing table, from the 36 medians (µs per pair) in `uncontended`'s order.
fn print_table(title: &str, m: &[f64]) {
    println!("\n{title}, median of {BATCHES} interleaved batches of {BATCH} (µs per pair):");
    println!(
        "  runtime        pattern     raw  raw Cmd    floor  lockman  ÷ raw  ÷ raw Cmd  ÷ floor  floor÷raw Cmd"
    );
    let runtimes = ["tokio (1 thread)", "tokio (multi)", "actix"];
    for (r, runtime) in runtimes.into_iter().enumerate() {
        for (p, pattern) in ["tight", "idle", "request"].into_iter().enumerate() {
            let i = 12 * r + 4 * p;
            let (raw, cmd, floor, lockman) = (m[i], m[i + 1], m[i + 2], m[i + 3]);
            println!(
                "  {runtime:<16} {pattern:<8} {raw:>6.1}  {cmd:>7.1}  {floor:>7.1}  {lockman:>7.1}  {:>5.2}  {:>9.2}  {:>7.2}  {:>13.2}",
                lockman / raw,
                lockman / cmd,
                lockman / floor,
                floor / cmd
            );
        }
    }
}

/// Runs the comparison: `client` makes the raw side's connections, `config` lockman's.
pub fn uncontended(title: &str, client: impl Fn() -> redis::Client, config: impl Fn() -> Config) {
    let rt = stats::tokio_runtime();
    let mt = stats::tokio_multi_thread();
    // One floor directory for both tokio flavours, on its own thread, as lockman's actors are.
    let far_floors = Floors::on_own_thread(client());
    let tokio_side = rt.block_on(side(&client, &config, far_floors.clone(), "tokio"));
    let mt_side = mt.block_on(side(&client, &config, far_floors, "mt"));
    // Created after the tokio managers: an actix System makes this thread's arbiter its own.
    let actix = actix_rt::System::new();
    let floors = actix.block_on(Floors::here(client()));
    let actix_side = actix.block_on(side(&client, &config, floors, "actix"));

    criterion_part(title, &rt, &actix, &tokio_side, &actix_side);

    // Interleaved batches, so that noise hits every series alike; medians of batch means.
    let mut series = vec![Vec::new(); 36];
    for _ in 0..BATCHES {
        let batches = [
            rt.block_on(tokio_side.batch()),
            mt.block_on(mt_side.batch()),
            actix.block_on(actix_side.batch()),
        ];
        for (i, d) in batches.into_iter().flatten().enumerate() {
            series[i].push(d / BATCH);
        }
    }
    let m: Vec<f64> = series
        .into_iter()
        .map(|s| stats::median(s).as_secs_f64() * 1e6)
        .collect();
    print_table(title, &m);
}
