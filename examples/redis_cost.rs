//! What one uncontended acquire+release costs Redis, per lock kind: the figures behind
//! BENCHMARKS.md's "Scale on paper". For each kind, one task runs PAIRS acquire+release pairs
//! through lockman against a throwaway redis-server started for the run (after a warm-up), and
//! the server's own counters are read before and after:
//! - `INFO commandstats`: EVALSHA calls and their `usec` (the scripts' execution, the commands
//!   inside them included; not the socket I/O);
//! - `INFO cpu`: the server process's user + system CPU time (everything, I/O included).
//!
//! The raw floor (redis-rs running lockman's reentrant scripts, `benches/common/raw.rs`) is
//! measured the same way. Run: `cargo run --release --example redis_cost -- [PAIRS]`
//! (default 20,000).

#[path = "../benches/common/raw.rs"]
mod raw;
#[path = "../tests/support/mod.rs"]
mod support;

use lockman::{Config, LockManager};

/// The server's counters at one moment.
struct Counters {
    evalsha_calls: u64,
    evalsha_usec: u64,
    cpu_seconds: f64,
}

fn counters(conn: &mut redis::Connection) -> Counters {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO");
    let (mut evalsha_calls, mut evalsha_usec) = (0, 0);
    for line in stats.lines() {
        if let Some(rest) = line.strip_prefix("cmdstat_evalsha:") {
            for field in rest.split(',') {
                match field.split_once('=') {
                    Some(("calls", v)) => evalsha_calls = v.parse().unwrap_or(0),
                    Some(("usec", v)) => evalsha_usec = v.parse().unwrap_or(0),
                    _ => {}
                }
            }
        }
    }
    let cpu: String = redis::cmd("INFO").arg("cpu").query(conn).expect("INFO");
    let seconds = |key: &str| -> f64 {
        cpu.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    Counters {
        evalsha_calls,
        evalsha_usec,
        cpu_seconds: seconds("used_cpu_user:") + seconds("used_cpu_sys:"),
    }
}

fn main() {
    let pairs: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let server = support::RedisServer::start();
    let url = server.url();
    let mut conn = server.conn();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("Redis per uncontended acquire+release, {pairs} pairs per kind, one task:");
    println!(
        "| kind | EVALSHA per pair | EVALSHA usec_per_call | script µs per pair | server CPU µs per pair | pairs/s per Redis core |"
    );
    println!("|---|---|---|---|---|---|");
    let mut report = |kind: &str, run: &dyn Fn(u64)| {
        run(200);
        let before = counters(&mut conn);
        run(pairs);
        let after = counters(&mut conn);
        let calls = after.evalsha_calls - before.evalsha_calls;
        let usec = (after.evalsha_usec - before.evalsha_usec) as f64;
        let cpu_us = (after.cpu_seconds - before.cpu_seconds) * 1e6 / pairs as f64;
        println!(
            "| {kind} | {:.2} | {:.2} | {:.2} | {cpu_us:.1} | {:.0} |",
            calls as f64 / pairs as f64,
            usec / calls.max(1) as f64,
            usec / pairs as f64,
            1e6 / cpu_us,
        );
    };
    let raw_conn = rt.block_on(raw::connect(&url));
    report("raw floor (reentrant scripts)", &|n| {
        rt.block_on(async {
            for _ in 0..n {
                raw::pair(
                    &raw_conn,
                    "cost:raw",
                    "00000000-0000-4000-8000-000000000000:1",
                )
                .await;
            }
        })
    });
    let manager = rt
        .block_on(LockManager::start(Config::new(url.clone())))
        .expect("manager");
    // Every kind's handle derefs to the `Lock` of that kind (fenced: its guard's token aside).
    let rw = manager.read_write_lock("cost:rw");
    let kinds: [(&str, lockman::Lock); 5] = [
        ("reentrant", manager.lock("cost:reentrant")),
        ("fenced", (*manager.fenced_lock("cost:fenced")).clone()),
        ("fair", (*manager.fair_lock("cost:fair")).clone()),
        ("write", (*rw.write()).clone()),
        ("read", (*rw.read()).clone()),
    ];
    for (kind, lock) in &kinds {
        report(kind, &|n| {
            rt.block_on(async {
                for _ in 0..n {
                    let guard = lock.acquire().await.expect("acquire");
                    guard.release().await.expect("release");
                }
            })
        });
    }
    rt.block_on(manager.shutdown());
}
