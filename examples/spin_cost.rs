//! What a hand-off costs Redis when many clients wait on one name, per lock kind: the figures
//! behind BENCHMARKS.md's "Spin lock". For each kind (plain, fair, spin) and each number of
//! waiting clients W, W + 1 clients (each a `LockManager` of its own: its own client id,
//! connections and subscription, as a process would have; all in this process) run one task
//! each, taking the lock `hot`, holding it HOLD ms, releasing it and waiting HOLD ms, until ACQUISITIONS
//! acquisitions were made; a fresh throwaway redis-server per run. Redis's own count of EVALSHA
//! calls (`INFO commandstats`) over the run, less what the same clients run idle for as long
//! (client records; measured before the run over 2 s), divided by the acquisitions: script
//! calls per acquisition (one acquisition is one hand-off), and PUBLISH calls per acquisition
//! (Redis counts those its scripts make).
//!
//! Run: `cargo run --release --example spin_cost -- [WAITING,...] [ACQUISITIONS] [HOLD_MS]`
//! (defaults: `1,10,40,100 300 5`).
//!
//! `spin_cost procs [WAITING,...] [ACQUISITIONS] [HOLD_MS]`: the same, each client a process of
//! its own (this example started again as a child, one manager on one arbiter thread and a
//! current-thread runtime); the children count acquisitions with `INCR` on a key of their own
//! (not a script: not in the counts), are started and warmed up first, and all begin at one
//! word from the parent on their standard input.
//!
//! `spin_cost latency [ROUNDS] [HOLD_MS]`: hand-off latency with one waiter, plain beside spin:
//! a holder takes `hot` and holds it HOLD ms (default 50) while another manager's task waits;
//! the time from the release call to the waiter's grant, over ROUNDS (default 200) rounds,
//! p50 / p99 / max.

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockman::{Config, LockManager};
use support::commands::command_calls;

#[derive(Clone, Copy)]
enum Kind {
    Plain,
    Fair,
    Spin,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Fair => "fair",
            Kind::Spin => "spin",
        }
    }

    fn lock(self, manager: &LockManager) -> lockman::Lock {
        match self {
            Kind::Plain => manager.lock("hot"),
            Kind::Fair => (*manager.fair_lock("hot")).clone(),
            Kind::Spin => manager.spin_lock("hot"),
        }
    }
}

struct Run {
    scripts: f64,
    publishes: f64,
    per_second: f64,
    background: u64,
}

async fn run(kind: Kind, waiting: usize, acquisitions: u64, hold: Duration) -> Run {
    let server = support::RedisServer::start();
    let mut conn = server.conn();
    let mut managers = Vec::new();
    for _ in 0..=waiting {
        managers.push(
            LockManager::start(Config::new(server.url()))
                .await
                .expect("manager"),
        );
    }
    // Warm-up: each client takes the lock once (scripts loaded, actors started).
    for m in &managers {
        kind.lock(m)
            .acquire()
            .await
            .expect("acquire")
            .release()
            .await
            .expect("release");
    }
    let idle = Duration::from_secs(2);
    let before = command_calls(&mut conn, "evalsha");
    tokio::time::sleep(idle).await;
    let background = command_calls(&mut conn, "evalsha") - before;

    let (evalsha, publish) = (
        command_calls(&mut conn, "evalsha"),
        command_calls(&mut conn, "publish"),
    );
    let count = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for m in &managers {
        let (lock, count) = (kind.lock(m), count.clone());
        tasks.push(tokio::spawn(async move {
            while count.load(Ordering::SeqCst) < acquisitions {
                let guard = lock.acquire().await.expect("acquire");
                count.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(hold).await;
                guard.release().await.expect("release");
                // Work between holds, as a client has: without it a spin lock's releaser takes
                // it straight back (it is not fair) and the others' polls go unanswered.
                tokio::time::sleep(hold).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let elapsed = started.elapsed();
    let made = count.load(Ordering::SeqCst) as f64;
    let scripts = (command_calls(&mut conn, "evalsha") - evalsha) as f64
        - background as f64 * elapsed.as_secs_f64() / idle.as_secs_f64();
    let publishes = (command_calls(&mut conn, "publish") - publish) as f64;
    for m in managers {
        m.shutdown().await;
    }
    Run {
        scripts: scripts / made,
        publishes: publishes / made,
        per_second: made / elapsed.as_secs_f64(),
        background,
    }
}

/// A child of `procs`: one client, `kind` on `url`, until the counter reaches `acquisitions`.
fn child(args: &[String]) {
    let (url, kind, acquisitions, hold) = (
        args[0].clone(),
        match args[1].as_str() {
            "plain" => Kind::Plain,
            "fair" => Kind::Fair,
            _ => Kind::Spin,
        },
        args[2].parse::<i64>().expect("acquisitions"),
        Duration::from_millis(args[3].parse().expect("hold")),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let manager = LockManager::start(Config::new(url.clone()).arbiters(1))
            .await
            .expect("manager");
        let lock = kind.lock(&manager);
        lock.acquire()
            .await
            .expect("acquire")
            .release()
            .await
            .expect("release");
        let client = redis::Client::open(url).expect("url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("conn");
        println!("ready");
        let mut line = String::new();
        // The parent's word to begin (blocking: nothing else runs here meanwhile).
        std::io::stdin().read_line(&mut line).expect("stdin");
        loop {
            let guard = lock.acquire().await.expect("acquire");
            let n: i64 = redis::cmd("INCR")
                .arg("spin_cost:count")
                .query_async(&mut conn)
                .await
                .expect("INCR");
            tokio::time::sleep(hold).await;
            guard.release().await.expect("release");
            if n >= acquisitions {
                break;
            }
            tokio::time::sleep(hold).await;
            let done: i64 = redis::cmd("GET")
                .arg("spin_cost:count")
                .query_async(&mut conn)
                .await
                .unwrap_or(0);
            if done >= acquisitions {
                break;
            }
        }
        manager.shutdown().await;
    });
}

/// `procs`: W + 1 child processes on a fresh server.
fn run_procs(kind: Kind, waiting: usize, acquisitions: u64, hold: Duration) -> Run {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    let server = support::RedisServer::start();
    let mut conn = server.conn();
    let me = std::env::current_exe().expect("exe");
    let mut children = Vec::new();
    for _ in 0..=waiting {
        let mut c = Command::new(&me)
            .args([
                "child",
                &server.url(),
                kind.label(),
                &acquisitions.to_string(),
                &hold.as_millis().to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("child");
        let mut out = BufReader::new(c.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("ready");
        assert_eq!(line.trim(), "ready", "a child failed to start");
        children.push(c);
    }
    let idle = Duration::from_secs(2);
    let before = command_calls(&mut conn, "evalsha");
    std::thread::sleep(idle);
    let background = command_calls(&mut conn, "evalsha") - before;
    let (evalsha, publish) = (
        command_calls(&mut conn, "evalsha"),
        command_calls(&mut conn, "publish"),
    );
    let started = Instant::now();
    for c in &mut children {
        let stdin = c.stdin.as_mut().expect("stdin");
        stdin.write_all(b"go\n").expect("go");
        stdin.flush().expect("flush");
    }
    for mut c in children {
        assert!(c.wait().expect("wait").success(), "a child failed");
    }
    let elapsed = started.elapsed();
    let made: i64 = redis::cmd("GET")
        .arg("spin_cost:count")
        .query(&mut conn)
        .expect("GET");
    let made = made as f64;
    let scripts = (command_calls(&mut conn, "evalsha") - evalsha) as f64
        - background as f64 * elapsed.as_secs_f64() / idle.as_secs_f64();
    let publishes = (command_calls(&mut conn, "publish") - publish) as f64;
    Run {
        scripts: scripts / made,
        publishes: publishes / made,
        per_second: made / elapsed.as_secs_f64(),
        background,
    }
}

/// `latency`: release → the waiter's grant, one waiter in another manager.
async fn latency(kind: Kind, rounds: usize, hold: Duration) -> Vec<Duration> {
    let server = support::RedisServer::start();
    let holder = LockManager::start(Config::new(server.url()))
        .await
        .expect("manager");
    let waiter = LockManager::start(Config::new(server.url()))
        .await
        .expect("manager");
    let (a, b) = (kind.lock(&holder), kind.lock(&waiter));
    for l in [&a, &b] {
        l.acquire()
            .await
            .expect("acquire")
            .release()
            .await
            .expect("release");
    }
    let mut took = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let guard = a.acquire().await.expect("acquire");
        let b = b.clone();
        let waiting = tokio::spawn(async move {
            let g = b.acquire().await.expect("acquire");
            let at = Instant::now();
            g.release().await.expect("release");
            at
        });
        tokio::time::sleep(hold).await;
        let released = Instant::now();
        guard.release().await.expect("release");
        let granted = waiting.await.expect("waiter");
        took.push(granted.saturating_duration_since(released));
    }
    holder.shutdown().await;
    waiter.shutdown().await;
    took.sort();
    took
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("child") {
        return child(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("latency") {
        let rounds = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(200);
        let hold = Duration::from_millis(args.get(2).and_then(|a| a.parse().ok()).unwrap_or(50));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        println!(
            "Hand-off latency, release call to the waiter's grant, one waiter, hold {hold:?}, {rounds} rounds:"
        );
        println!("| kind | p50 | p99 | max |");
        println!("|---|---|---|---|");
        for kind in [Kind::Plain, Kind::Spin] {
            let t = rt.block_on(latency(kind, rounds, hold));
            let at = |q: f64| t[((t.len() as f64 * q) as usize).min(t.len() - 1)];
            println!(
                "| {} | {:.2?} | {:.2?} | {:.2?} |",
                kind.label(),
                at(0.5),
                at(0.99),
                t[t.len() - 1]
            );
        }
        return;
    }
    let procs = args.first().map(String::as_str) == Some("procs");
    if procs {
        args.remove(0);
    }
    let waiting: Vec<usize> = args
        .first()
        .map(|a| a.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 10, 40, 100]);
    let acquisitions: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(300);
    let hold = Duration::from_millis(args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let each = if procs { "process" } else { "client" };
    println!(
        "Script calls per acquisition, {acquisitions} acquisitions, one {each} per waiter, hold {hold:?} then as long between holds, one task per client:"
    );
    println!(
        "| waiting clients | kind | EVALSHA per acquisition | PUBLISH per acquisition | acquisitions/s | idle EVALSHA in 2 s (subtracted) |"
    );
    println!("|---|---|---|---|---|---|");
    for &w in &waiting {
        for kind in [Kind::Plain, Kind::Fair, Kind::Spin] {
            let r = if procs {
                run_procs(kind, w, acquisitions, hold)
            } else {
                rt.block_on(run(kind, w, acquisitions, hold))
            };
            println!(
                "| {w} | {} | {:.2} | {:.2} | {:.0} | {} |",
                kind.label(),
                r.scripts,
                r.publishes,
                r.per_second,
                r.background
            );
        }
    }
}
