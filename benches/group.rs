//! One group multi-lock acquire + release of N members (`LockManager::group_lock`: one script
//! each way) beside a `MultiLock` of N reentrant locks (one script per member each way), for
//! N = 1, 100, 1,000, alternating in one sitting against one redis-server: wall time per
//! acquire + release (median of the rounds) and script calls per acquire + release (EVALSHA
//! counted by the server, INFO commandstats).
//!
//! Run: `cargo bench --bench group` (starts its own redis-server; `REDIS_SERVER_BIN` picks it).

#[path = "common/stats.rs"]
mod stats;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use lockman::{Config, LockManager, MultiLock};

/// Rounds per size and kind, alternating group and MultiLock.
const ROUNDS: usize = 31;

fn main() {
    let server = support::RedisServer::start();
    let mut raw = server.conn();
    let actix = actix_rt::System::new();
    let mgr = actix.block_on(async {
        LockManager::start(Config::new(server.url()))
            .await
            .expect("manager")
    });
    println!("size  kind        median_us  min_us  scripts_per_op");
    for n in [1usize, 100, 1_000] {
        let members: Vec<String> = (0..n).map(|i| format!("item{i}")).collect();
        let group = mgr
            .group_lock(format!("bench:group:{n}"), members.iter().cloned())
            .expect("members");
        let multi = MultiLock::new(
            members
                .iter()
                .map(|m| mgr.lock(format!("bench:multi:{n}:{m}")))
                .collect(),
        );
        let (mut g_times, mut m_times) = (Vec::new(), Vec::new());
        let (mut g_calls, mut m_calls) = (0u64, 0u64);
        // One round of each first, unmeasured: scripts loaded, actors started.
        actix.block_on(async {
            group
                .acquire()
                .await
                .expect("group")
                .release()
                .await
                .expect("release");
            multi
                .acquire()
                .await
                .expect("multi")
                .release()
                .await
                .expect("release");
        });
        for _ in 0..ROUNDS {
            let before = support::commands::command_calls(&mut raw, "evalsha");
            let took = actix.block_on(async {
                let t = Instant::now();
                let g = group.acquire().await.expect("group");
                g.release().await.expect("release");
                t.elapsed()
            });
            g_calls += support::commands::command_calls(&mut raw, "evalsha") - before;
            g_times.push(took);
            let before = support::commands::command_calls(&mut raw, "evalsha");
            let took = actix.block_on(async {
                let t = Instant::now();
                let g = multi.acquire().await.expect("multi");
                g.release().await.expect("release");
                t.elapsed()
            });
            m_calls += support::commands::command_calls(&mut raw, "evalsha") - before;
            m_times.push(took);
        }
        for (kind, times, calls) in [("group", g_times, g_calls), ("multilock", m_times, m_calls)] {
            let min = times.iter().min().copied().unwrap_or(Duration::ZERO);
            let median = stats::median(times);
            println!(
                "{n:>5} {kind:<11} {:>10} {:>7} {:>15.1}",
                median.as_micros(),
                min.as_micros(),
                calls as f64 / ROUNDS as f64
            );
        }
    }
    actix.block_on(mgr.shutdown());
}
