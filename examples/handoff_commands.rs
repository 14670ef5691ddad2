//! Commands per hand-off by the number of waiters (issue 60, item 5), counted from the server's
//! `INFO commandstats` deltas: for each kind (reentrant, fair, read-write's write side, spin,
//! semaphore of one permit, permit semaphore of one permit), N waiting processes on one name,
//! each taking it TAKES times and holding it HOLD ms, and N waiters (tasks) in one process doing
//! the same through one manager. The figures are per acquisition: scripts Redis ran
//! (EVALSHA/EVAL), messages published (PUBLISH/SPUBLISH, inside scripts), everything the clients
//! sent (scripts, subscriptions, pings), and every command Redis executed (those inside the
//! scripts included).
//!
//! Run: `cargo run --release --example handoff_commands -- [--kinds K,K…] [--only
//! processes|tasks] [N…]` (N defaults to 1 10 100; it starts its own redis-server; the waiter
//! processes run under `nice -n 10`). Internal role, started by the run itself:
//! `handoff_commands child KIND URL NAME TAKES HOLD_MS` (prints `ready`, waits for a line on
//! stdin, takes its turns, exits).

#[path = "../tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use lockman::{Lock, LockManager, PermitSemaphore, Semaphore};
use support::commands::{command_stats, server_version};

/// Turns each waiter takes.
const TAKES: u32 = 20;
/// How long each turn holds the name (ms).
const HOLD_MS: u64 = 2;
const KINDS: [&str; 6] = ["reentrant", "fair", "write", "spin", "semaphore", "permit"];
/// Commands the clients send themselves; the rest in `INFO commandstats` ran inside scripts.
const SENT: &[&str] = &[
    "evalsha",
    "eval",
    "script|load",
    "subscribe",
    "unsubscribe",
    "ssubscribe",
    "sunsubscribe",
    "ping",
    "client|setinfo",
    "client|setname",
    "hello",
    "select",
];

/// One waiter's handle on the name.
enum Handle {
    Lock(Lock),
    Semaphore(Semaphore),
    Permit(PermitSemaphore),
}

impl Handle {
    fn new(manager: &LockManager, kind: &str, name: &str) -> Self {
        match kind {
            "reentrant" => Handle::Lock(manager.lock(name)),
            "fair" => Handle::Lock((*manager.fair_lock(name)).clone()),
            "write" => Handle::Lock((*manager.read_write_lock(name).write()).clone()),
            "spin" => Handle::Lock(manager.spin_lock(name)),
            "semaphore" => Handle::Semaphore(manager.semaphore(name)),
            "permit" => Handle::Permit(manager.permit_semaphore(name)),
            other => panic!("unknown kind {other:?}"),
        }
    }

    /// Takes the name once, holds it `hold`, releases it.
    async fn turn(&self, hold: Duration) {
        match self {
            Handle::Lock(lock) => {
                let guard = lock.acquire().await.expect("acquire");
                tokio::time::sleep(hold).await;
                guard.release().await.expect("release");
            }
            Handle::Semaphore(sem) => {
                let guard = sem.acquire(1).await.expect("acquire");
                tokio::time::sleep(hold).await;
                guard.release().await.expect("release");
            }
            Handle::Permit(sem) => {
                let guard = sem.acquire(1).await.expect("acquire");
                tokio::time::sleep(hold).await;
                guard.release().await.expect("release");
            }
        }
    }

    /// One permit in all, for the semaphores; nothing for the locks.
    async fn set_up(&self) {
        match self {
            Handle::Lock(_) => {}
            Handle::Semaphore(sem) => {
                sem.try_set_permits(1).await.expect("permits");
            }
            Handle::Permit(sem) => {
                sem.try_set_permits(1).await.expect("permits");
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("child") {
        return child(&args[1..]);
    }
    let mut kinds: Vec<String> = KINDS.iter().map(|k| (*k).to_owned()).collect();
    let (mut processes, mut tasks) = (true, true);
    let mut ns: Vec<usize> = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--kinds" => {
                let list = args.next().expect("--kinds K,K…");
                kinds = list.split(',').map(str::to_owned).collect();
            }
            "--only" => match args.next().as_deref() {
                Some("processes") => tasks = false,
                Some("tasks") => processes = false,
                other => panic!("--only processes|tasks, not {other:?}"),
            },
            n => ns.push(n.parse().expect("N: a number")),
        }
    }
    if ns.is_empty() {
        ns = vec![1, 10, 100];
    }
    let server = support::RedisServer::start();
    let url = server.url();
    println!(
        "Per acquisition, N waiters on one name, each taking it {TAKES} times and holding it \
         {HOLD_MS} ms; scripts / sent / executed (redis {}):\n",
        server_version(&mut server.conn())
    );
    println!(
        "| kind | N | where | scripts | published | sent | executed | acquisitions/s | load average (1 min) before, after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for kind in &kinds {
        for &n in &ns {
            if processes {
                let before = load_average();
                let counted = in_processes(&server, &url, kind, n);
                let after = load_average();
                println!("| {kind} | {n} | processes | {counted} | {before}, {after} |");
            }
            if tasks {
                let before = load_average();
                let counted = in_one_process(&server, &url, kind, n);
                let after = load_average();
                println!("| {kind} | {n} | one process | {counted} | {before}, {after} |");
            }
        }
    }
}

/// The 1-minute load average (`/proc/loadavg`), or `?`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// One row's half: counts per acquisition and the rate.
struct Counted {
    acquisitions: u64,
    stats: Vec<(String, u64)>,
    took: Duration,
}

impl std::fmt::Display for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per = |n: u64| n as f64 / self.acquisitions as f64;
        let sum = |keep: &dyn Fn(&str) -> bool| -> u64 {
            self.stats
                .iter()
                .filter(|(c, _)| keep(c))
                .map(|(_, n)| n)
                .sum()
        };
        let scripts = sum(&|c| c == "evalsha" || c == "eval");
        let published = sum(&|c| c == "publish" || c == "spublish");
        let sent = sum(&|c| SENT.contains(&c));
        let executed = sum(&|c| !c.starts_with("config") && c != "info");
        write!(
            f,
            "{:.2} | {:.2} | {:.2} | {:.2} | {:.0}",
            per(scripts),
            per(published),
            per(sent),
            per(executed),
            self.acquisitions as f64 / self.took.as_secs_f64()
        )
    }
}

/// Makes the kind's keys ready and its scripts loaded (a fresh server answers each script's
/// first EVALSHA with NOSCRIPT), then resets the counts.
fn prepare(server: &support::RedisServer, url: &str, kind: &str, name: &str) {
    let rt = actix_rt::System::new();
    rt.block_on(async {
        let manager = LockManager::connect(url).await.expect("manager");
        let handle = Handle::new(&manager, kind, name);
        handle.set_up().await;
        handle.turn(Duration::ZERO).await;
        manager.shutdown().await;
    });
    support::commands::reset_stats(&mut server.conn());
}

/// N child processes on one name.
fn in_processes(server: &support::RedisServer, url: &str, kind: &str, n: usize) -> Counted {
    let name = format!("hc:{kind}:p{n}");
    let exe = std::env::current_exe().expect("this example");
    let mut children: Vec<_> = (0..n)
        .map(|_| {
            // Niced, so that 100 waiter processes leave the server and the other work its share
            // of the machine.
            Command::new("nice")
                .args(["-n", "10"])
                .arg(&exe)
                .args(["child", kind, url, &name])
                .args([TAKES.to_string(), HOLD_MS.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn child")
        })
        .collect();
    for child in &mut children {
        let mut line = String::new();
        let stdout = child.stdout.as_mut().expect("piped stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("child output");
        assert_eq!(line.trim(), "ready", "child said {line:?}");
    }
    prepare(server, url, kind, &name);
    let start = Instant::now();
    for child in &mut children {
        let stdin = child.stdin.as_mut().expect("piped stdin");
        writeln!(stdin, "go").expect("child stdin");
    }
    for mut child in children {
        assert!(child.wait().expect("child").success(), "a child failed");
    }
    let took = start.elapsed();
    Counted {
        acquisitions: n as u64 * u64::from(TAKES),
        stats: command_stats(&mut server.conn()),
        took,
    }
}

/// N tasks in one process, one manager, on one name.
fn in_one_process(server: &support::RedisServer, url: &str, kind: &str, n: usize) -> Counted {
    let name = format!("hc:{kind}:t{n}");
    actix_rt::System::new().block_on(async {
        let manager = LockManager::connect(url).await.expect("manager");
        let handles: Vec<Handle> = (0..n).map(|_| Handle::new(&manager, kind, &name)).collect();
        prepare_here(server, &handles[0]).await;
        let start = Instant::now();
        join_all(handles.iter().map(|h| async move {
            for _ in 0..TAKES {
                h.turn(Duration::from_millis(HOLD_MS)).await;
            }
        }))
        .await;
        let took = start.elapsed();
        let counted = Counted {
            acquisitions: n as u64 * u64::from(TAKES),
            stats: command_stats(&mut server.conn()),
            took,
        };
        manager.shutdown().await;
        counted
    })
}

/// `prepare`, through this process's manager.
async fn prepare_here(server: &support::RedisServer, handle: &Handle) {
    handle.set_up().await;
    handle.turn(Duration::ZERO).await;
    support::commands::reset_stats(&mut server.conn());
}

/// A waiter process: connects, says `ready`, waits for a line, takes its turns.
fn child(args: &[String]) {
    let [kind, url, name, takes, hold] = args else {
        panic!("child KIND URL NAME TAKES HOLD_MS");
    };
    let takes: u32 = takes.parse().expect("TAKES");
    let hold = Duration::from_millis(hold.parse().expect("HOLD_MS"));
    actix_rt::System::new().block_on(async {
        let manager = LockManager::connect(url).await.expect("manager");
        let handle = Handle::new(&manager, kind, name);
        println!("ready");
        std::io::stdout().flush().expect("stdout");
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).expect("stdin");
        for _ in 0..takes {
            handle.turn(hold).await;
        }
        manager.shutdown().await;
    });
}
