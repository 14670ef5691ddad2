//! How soon a holder learns that its hold is gone, with and without the watch
//! (`Config::watch_holds`): the figures behind BENCHMARKS.md's "Loss known at once".
//!
//! Against a throwaway redis-server (or `REDIS_SERVER_BIN`'s), a manager with a watchdog timeout
//! of 3 s (renewal every 1 s) takes HOLDS locks, waits until the watchdog has them all (and, with
//! the watch, until the server tracks their keys), then deletes them from another connection one
//! at a time, each after a random pause, and times each guard's `lost()` from its `DEL`. It also
//! counts the script calls a renewed hold costs: Redis's `INFO commandstats` EVALSHA calls over
//! one renewal round of all the holds (without the watch only 30 of the holds are deleted and
//! timed, each after a random pause of up to a renewal interval: each loss waits for a renewal).
//! Last, the server memory 10,000 watched holds take (`INFO memory`, with the watch less
//! without). Run: `cargo run --release --example loss_latency --
//! [HOLDS] [memory|young]` (default 200; `memory`: only the memory figure; `young`: only young
//! holds, each deleted 100 ms after its grant, long before the watchdog renews it (a sixth of
//! the timeout, 500 ms), with the watch and without, HOLDS of each).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use lockman::{Config, LockManager};
use redis::Commands;
use support::{RedisServer, commands::command_calls, commands::reset_stats};

const WATCHDOG: Duration = Duration::from_secs(3);

fn tracked_keys(raw: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("stats").query(raw).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("tracking_total_keys:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn run(server: &RedisServer, holds: usize, timed: usize, watch: bool) {
    let mut raw = server.conn();
    let config = Config::new(server.url())
        .watchdog_timeout(WATCHDOG)
        .watch_holds(watch);
    let manager = LockManager::start(config).await.expect("manager");
    let mut guards = Vec::with_capacity(holds);
    for i in 0..holds {
        let guard = manager
            .lock(format!("loss:{i}"))
            .acquire()
            .await
            .expect("acquire");
        guards.push(guard);
    }
    // The watchdog takes them a sixth of the timeout after their grant.
    tokio::time::sleep(WATCHDOG / 6 + Duration::from_millis(200)).await;
    if watch {
        let deadline = Instant::now() + Duration::from_secs(5);
        while tracked_keys(&mut raw) < holds as u64 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // One renewal round of every hold: the script calls it cost.
    reset_stats(&mut raw);
    tokio::time::sleep(WATCHDOG / 3).await;
    let calls = command_calls(&mut raw, "evalsha");
    let mut times = Vec::with_capacity(holds);
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    // Without the watch a loss waits for the next renewal: each DEL after a random pause of up
    // to a renewal interval, so that DELs fall at random phases of it (not just after a tick).
    let most = if watch {
        50
    } else {
        (WATCHDOG / 3).as_millis() as u64
    };
    for (i, guard) in guards.iter().enumerate().take(timed) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let pause = Duration::from_millis(rng % most);
        tokio::time::sleep(pause).await;
        let _: () = raw.del(format!("loss:{i}")).expect("DEL");
        let deleted = Instant::now();
        tokio::time::timeout(WATCHDOG * 2, guard.lost())
            .await
            .expect("lost within two watchdog timeouts");
        times.push(deleted.elapsed());
    }
    times.sort();
    println!(
        "watch {:<3} holds {holds:>4}, {timed:>4} DELs: DEL → lost() p50 {:>9.3?} p99 {:>9.3?} max {:>9.3?}; \
         EVALSHA calls over one renewal interval: {calls} ({:.2} per hold)",
        if watch { "on" } else { "off" },
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times[times.len() - 1],
        calls as f64 / holds as f64,
    );
    drop(guards);
    manager.shutdown().await;
}

fn used_memory(raw: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("memory").query(raw).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The server's `used_memory` with `holds` watched holds, less the same without the watch:
/// the tracking table (and the tracking connection's buffers), each on a fresh server.
async fn memory(holds: usize) {
    let mut used = [0i64; 2];
    for (i, watch) in [false, true].into_iter().enumerate() {
        let server = RedisServer::start();
        let mut raw = server.conn();
        let config = Config::new(server.url())
            .watchdog_timeout(WATCHDOG)
            .watch_holds(watch);
        let manager = LockManager::start(config).await.expect("manager");
        let mut guards = Vec::with_capacity(holds);
        for i in 0..holds {
            let lock = manager.lock(format!("mem:{i}"));
            guards.push(lock.acquire().await.expect("acquire"));
        }
        tokio::time::sleep(WATCHDOG / 6 + Duration::from_millis(500)).await;
        if watch {
            let deadline = Instant::now() + Duration::from_secs(10);
            while tracked_keys(&mut raw) < holds as u64 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        used[i] = used_memory(&mut raw);
        println!(
            "  watch {watch}: {} keys tracked, used_memory {} B",
            tracked_keys(&mut raw),
            used[i]
        );
        drop(guards);
        manager.shutdown().await;
    }
    println!(
        "{holds} holds: used_memory {} B without the watch, {} B with it: {} B more ({:.0} B per hold)",
        used[0],
        used[1],
        used[1] - used[0],
        (used[1] - used[0]) as f64 / holds as f64
    );
}

/// Young holds: each taken, deleted 100 ms after its grant from another connection, and its
/// `lost()` timed from the `DEL`, one hold at a time.
async fn young(server: &RedisServer, holds: usize, watch: bool) {
    let mut raw = server.conn();
    let config = Config::new(server.url())
        .watchdog_timeout(WATCHDOG)
        .watch_holds(watch);
    let manager = LockManager::start(config).await.expect("manager");
    let mut times = Vec::with_capacity(holds);
    for i in 0..holds {
        let name = format!("young:{}:{i}", u8::from(watch));
        let asked = Instant::now();
        let guard = manager
            .lock(name.as_str())
            .acquire()
            .await
            .expect("acquire");
        tokio::time::sleep(Duration::from_millis(100).saturating_sub(asked.elapsed())).await;
        let _: () = raw.del(&name).expect("DEL");
        let deleted = Instant::now();
        tokio::time::timeout(WATCHDOG * 2, guard.lost())
            .await
            .expect("lost within two watchdog timeouts");
        times.push(deleted.elapsed());
    }
    times.sort();
    println!(
        "young holds, watch {:<3} {holds:>4} DELs 100 ms after the grant: DEL → lost() p50 {:>9.3?} p99 {:>9.3?} max {:>9.3?}",
        if watch { "on" } else { "off" },
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times[times.len() - 1],
    );
    manager.shutdown().await;
}

#[tokio::main]
async fn main() {
    let holds: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    if std::env::args().nth(2).as_deref() == Some("memory") {
        return memory(10_000).await;
    }
    if std::env::args().nth(2).as_deref() == Some("young") {
        let server = RedisServer::start();
        for _ in 0..2 {
            young(&server, holds, false).await;
            young(&server, holds, true).await;
        }
        return;
    }
    let server = RedisServer::start();
    // Before (renewal only) and after (the watch), in one sitting, twice each.
    // Without the watch each loss waits for a renewal (half a second on average): fewer holds.
    for _ in 0..2 {
        run(&server, holds, holds.min(30), false).await;
        run(&server, holds, holds, true).await;
    }
    memory(10_000).await;
}
