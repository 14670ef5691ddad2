//! Redis Cluster, against a local cluster of three masters started for the run:
//!
//! 1. throughput: 64 tasks on 64 names acquire+release through lockman, beside redis-rs's
//!    cluster client alone running the same two scripts by EVALSHA (64 loops on one cluster
//!    connection), inside an actix System, as medians of interleaved batches;
//! 2. hand-off latency inside one process (a holder in one manager releases, a waiter in
//!    another gets the lock), on the cluster and on a single redis-server, interleaved;
//! 3. renewal at 10,000 held locks spread over the slots: script calls per tick, split by node
//!    (INFO commandstats), and how many slots they span.
//!
//! Run: `cargo bench --bench cluster` (starts its own redis-servers; needs redis-cli).

#[path = "common/stats.rs"]
mod stats;
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use lockman::{Config, Lock, LockManager};
use redis::Script;
use redis::cluster_async::ClusterConnection;
use support::RedisServer;
use support::cluster::Cluster;

const TASKS: usize = 64;
const BATCH: u64 = 50;
const BATCHES: usize = 15;
const HANDOFFS: usize = 300;
const HELD: usize = 10_000;

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../src/protocol/acquire.lua")));
// lockman's release script: its prologue, then its tail (src/protocol/mod.rs).
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../src/protocol/release_prologue.lua"),
        include_str!("../src/protocol/release.lua")
    ))
});

/// The raw floor: one acquire + release of `name` by EVALSHA on the cluster connection.
async fn raw_pair(conn: &ClusterConnection, name: &str, holder: &str) {
    let mut c = conn.clone();
    let taken: redis::Value = ACQUIRE
        .key(name)
        .arg(30_000)
        .arg(holder)
        .invoke_async(&mut c)
        .await
        .expect("raw acquire");
    assert!(
        matches!(taken, redis::Value::Array(_)),
        "raw lock taken: {taken:?}"
    );
    let released: Option<i64> = RELEASE
        .key(name)
        .key(format!("redisson_lock__channel:{{{name}}}"))
        .arg("0")
        .arg(30_000)
        .arg(holder)
        .arg("spublish")
        .invoke_async(&mut c)
        .await
        .expect("raw release");
    assert_eq!(released, Some(1));
}

async fn raw_run(conn: &ClusterConnection, iters: u64) -> f64 {
    let start = Instant::now();
    join_all((0..TASKS).map(|t| async move {
        let (name, holder) = (format!("raw:{t}"), format!("raw-holder:{t}"));
        for _ in 0..iters {
            raw_pair(conn, &name, &holder).await;
        }
    }))
    .await;
    (iters * TASKS as u64) as f64 / start.elapsed().as_secs_f64()
}

async fn lockman_run(locks: &[Lock], iters: u64) -> f64 {
    let start = Instant::now();
    join_all(locks.iter().map(|lock| async move {
        for _ in 0..iters {
            lock.acquire()
                .await
                .expect("acquire")
                .release()
                .await
                .expect("release");
        }
    }))
    .await;
    (iters * TASKS as u64) as f64 / start.elapsed().as_secs_f64()
}

/// One hand-off: `a` holds, `b` waits (subscribed), `a` releases; the time from the release
/// call to `b` holding it.
async fn handoff(a: &Lock, b: &Lock) -> Duration {
    let held = a.acquire().await.expect("hold");
    let waiter = b.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    actix_rt::spawn(async move {
        let guard = waiter.acquire().await.expect("wait");
        let _ = tx.send(Instant::now());
        guard.release().await.expect("release");
    });
    tokio::time::sleep(Duration::from_millis(2)).await;
    let released = Instant::now();
    held.release().await.expect("release");
    let got = rx.await.expect("woken");
    tokio::time::sleep(Duration::from_millis(1)).await;
    got - released
}

fn evalsha_calls(node: &lockman::testing::TestServer) -> u64 {
    support::commands::command_calls(&mut support::raw(node), "evalsha")
}

fn main() {
    let cluster = Cluster::start(3, 0);
    let single = RedisServer::start();
    let system = actix_rt::System::new();

    // 1. Throughput.
    let raw = system.block_on(async {
        let client = redis::cluster::ClusterClient::new(cluster.urls()).expect("client");
        client
            .get_async_connection()
            .await
            .expect("cluster connection")
    });
    let mgr = system
        .block_on(LockManager::start(Config::cluster(cluster.urls())))
        .expect("manager");
    let locks: Vec<Lock> = (0..TASKS).map(|t| mgr.lock(format!("tp:{t}"))).collect();
    system.block_on(raw_run(&raw, 2));
    system.block_on(lockman_run(&locks, 2));
    let (mut r, mut l) = (Vec::new(), Vec::new());
    for _ in 0..BATCHES {
        r.push(system.block_on(raw_run(&raw, BATCH)));
        l.push(system.block_on(lockman_run(&locks, BATCH)));
    }
    let (r, l) = (stats::median(r), stats::median(l));
    println!(
        "\n1. {TASKS} tasks on {TASKS} names over 3 masters, acquire+release pairs per second,"
    );
    println!(
        "   median of {BATCHES} interleaved batches of {BATCH} loops per task (actix System):"
    );
    println!(
        "   raw cluster EVALSHA {r:>8.0}/s   lockman {l:>8.0}/s   ratio {:.2}",
        l / r
    );

    // 2. Hand-off latency, cluster and single server, interleaved.
    let (hc, hs) = system.block_on(async {
        let cluster_b = LockManager::start(Config::cluster(cluster.urls()))
            .await
            .expect("b");
        let single_a = LockManager::connect(&single.url()).await.expect("a");
        let single_b = LockManager::connect(&single.url()).await.expect("b");
        let (ca, cb) = (mgr.lock("handoff"), cluster_b.lock("handoff"));
        let (sa, sb) = (single_a.lock("handoff"), single_b.lock("handoff"));
        let (mut hc, mut hs) = (Vec::new(), Vec::new());
        for _ in 0..HANDOFFS {
            hc.push(handoff(&ca, &cb).await);
            hs.push(handoff(&sa, &sb).await);
        }
        (hc, hs)
    });
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (pc, ps) = (us(stats::median(hc)), us(stats::median(hs)));
    println!("\n2. hand-off between two managers of one process, p50 of {HANDOFFS} each:");
    println!(
        "   cluster {pc:>7.0} µs   single server {ps:>7.0} µs   ratio {:.2}",
        pc / ps
    );

    // 3. Renewal at 10,000 holds over the slots.
    let watchdog = Duration::from_secs(3);
    let (calls, ticks, slots) = system.block_on(async {
        let config = Config::cluster(cluster.urls()).watchdog_timeout(watchdog);
        let holder = LockManager::start(config).await.expect("manager");
        let mut guards = Vec::with_capacity(HELD);
        for chunk in (0..HELD).collect::<Vec<_>>().chunks(500) {
            let taken = join_all(
                chunk
                    .iter()
                    .map(|i| holder.lock(format!("held:{i}")))
                    .map(|lock| async move { lock.acquire().await.expect("hold") }),
            )
            .await;
            guards.extend(taken);
        }
        // Let every hold reach the watchdog, then count over whole ticks.
        tokio::time::sleep(watchdog).await;
        for node in cluster.nodes() {
            support::commands::reset_stats(&mut support::raw(node));
        }
        let ticks = 6u32;
        tokio::time::sleep(watchdog / 3 * ticks).await;
        let calls: Vec<u64> = cluster.nodes().iter().map(evalsha_calls).collect();
        assert!(guards.iter().all(|g| !g.is_lost()), "a hold was lost");
        let slots: std::collections::HashSet<u16> = (0..HELD)
            .map(|i| cluster.slot_of(&format!("held:{i}")))
            .collect();
        (calls, ticks, slots.len())
    });
    let per_tick: Vec<f64> = calls.iter().map(|c| *c as f64 / f64::from(ticks)).collect();
    let total: f64 = per_tick.iter().sum();
    println!(
        "\n3. renewal of {HELD} holds over {slots} slots, {ticks} ticks of {:?}:",
        watchdog / 3
    );
    println!(
        "   script calls per tick {total:.0} (per node {}), all sent at once, each node's over its one connection",
        per_tick
            .iter()
            .map(|c| format!("{c:.0}"))
            .collect::<Vec<_>>()
            .join(" / ")
    );
    drop(system);
}
