//! The load generator behind BENCHMARKS.md: the process-level figures of issue 5, lockman beside
//! the floor (raw redis-rs EVALSHA) and beside rslock (with its defaults), all against one
//! throwaway redis-server started for the run, in the same run.
//!
//! 1. Hand-off latency: a holder in this process releases, a waiter in a second process (another
//!    client id) gets the lock; p50/p90/p99 beside the raw EVALSHA round trip and rslock's.
//!    With `--swap`, also the roles mixed (a raw holder and a lockman waiter, a lockman holder
//!    and a raw waiter): what lockman adds on the releasing side and on the waiting side.
//! 2. Redis commands per hand-off: 100 tasks on one name in one process, at least 1,000
//!    hand-offs, counted from `INFO commandstats` deltas.
//! 3. Watchdog at scale: 10,000 locks held without lease; renewal round trips per tick, Redis
//!    commands per second and this process's CPU time per tick.
//! 4. Memory: 100,000 distinct names acquired and released once each (in a fresh process); live
//!    lock actors and resident memory afterwards.
//! 5. Contended throughput: 8 tasks on one name, acquisitions per second, lockman vs rslock.
//!
//! It prints a Markdown table and writes an SVG chart of the hand-off latency distributions.
//!
//! Run: `cargo run --release --example loadgen -- [--quick] [--swap] [--svg PATH]`
//! (`--quick` shrinks every count, for a smoke run; the chart defaults to
//! `target/handoff-latency.svg`). Internal roles, started by the run itself:
//! `loadgen peer <lockman|rslock|raw> URL NAME` and `loadgen memory URL COUNT`.
//!
//! For instruction counts, which stay put on a noisy machine:
//! `valgrind --tool=callgrind target/release/examples/loadgen pairs <lockman|raw> URL ITERS
//! [tight|request] [TASKS]` runs TASKS tasks (64) on as many names, ITERS acquire+release pairs
//! each, in an actix System; the difference between two ITERS, divided by TASKS × their
//! difference, is the cost of one pair. `request` is a web handler's pattern: a handle made per
//! pair (`manager.lock(name)`, lockman only) and the name idle between pairs (a yield, both).
//! `loadgen turns <lockman|raw|rslock> URL COUNT [TASKS]` is the contended counterpart: TASKS
//! tasks (8), each spawned on its own, take turns on one name until COUNT acquisitions; it
//! prints how many it made (up to TASKS − 1 more than COUNT), the divisor of the difference.

#[path = "../benches/common/raw.rs"]
mod raw;
#[path = "../tests/support/mod.rs"]
mod support;

use std::cell::Cell;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;
use lockman::{Config, LockManager};
use redis::aio::ConnectionManager;
use support::commands::{command_stats, server_version};

/// How long a holder keeps the lock after its peer began waiting: the waiter's first attempt
/// has failed and it is waiting (lockman: subscribed; rslock: in its retry sleep).
const SETTLE: Duration = Duration::from_millis(5);
/// The lease rslock's locks are taken with (it has no watchdog); long enough never to expire.
const RSLOCK_TTL: Duration = Duration::from_secs(30);

/// A hand-off's holder (this process) and waiter (the peer process).
type Pair = (Impl, Impl);

/// How a pair is named in the report: the kind, or `holder → waiter` when they differ.
fn pair_name((held_by, waited_by): Pair) -> String {
    if held_by == waited_by {
        held_by.name().to_owned()
    } else {
        format!("{} holder → {} waiter", held_by.name(), waited_by.name())
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Impl {
    Lockman,
    Rslock,
    /// The floor for a hand-off: redis-rs alone, the same scripts by EVALSHA, a waiter that
    /// subscribes to the unlock channel and retries on each message (no actors, no bookkeeping).
    Raw,
}

impl Impl {
    fn name(self) -> &'static str {
        match self {
            Impl::Lockman => "lockman",
            Impl::Rslock => "rslock",
            Impl::Raw => "raw",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "lockman" => Impl::Lockman,
            "rslock" => Impl::Rslock,
            "raw" => Impl::Raw,
            other => panic!("unknown implementation {other:?}"),
        }
    }
}

/// The counts of one run.
struct Sizes {
    handoff_rounds: usize,
    rslock_every: usize,
    waiters: usize,
    commands_handoffs: u64,
    watchdog_locks: usize,
    memory_names: usize,
    contended_tasks: usize,
    contended_for: Duration,
}

impl Sizes {
    fn new(quick: bool) -> Self {
        let q = |full: usize, quick_n: usize| if quick { quick_n } else { full };
        Self {
            handoff_rounds: q(1000, 100),
            rslock_every: 5,
            waiters: 100,
            commands_handoffs: if quick { 200 } else { 1000 },
            watchdog_locks: q(10_000, 1000),
            memory_names: q(100_000, 5000),
            contended_tasks: 8,
            contended_for: Duration::from_secs(if quick { 1 } else { 5 }),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("peer") => return peer(Impl::parse(&args[1]), &args[2], &args[3]),
        Some("memory") => return memory_role(&args[1], args[2].parse().expect("count")),
        Some("pairs") => {
            return pairs(
                Impl::parse(&args[1]),
                &args[2],
                args[3].parse().expect("iters"),
                args.get(4).is_some_and(|p| p == "request"),
                args.get(5).map_or(64, |t| t.parse().expect("tasks")),
            );
        }
        Some("renewals") => {
            return renewals(
                &args[1],
                args[2].parse().expect("locks"),
                args[3].parse().expect("rounds"),
                Duration::from_millis(args.get(4).map_or(900, |t| t.parse().expect("timeout"))),
                args.get(5).is_none_or(|w| w != "unwatched"),
            );
        }
        Some("turns") => {
            return turns(
                Impl::parse(&args[1]),
                &args[2],
                args[3].parse().expect("count"),
                args.get(4).map_or(8, |t| t.parse().expect("tasks")),
            );
        }
        _ => {}
    }
    let quick = args.iter().any(|a| a == "--quick");
    let svg = args
        .iter()
        .position(|a| a == "--svg")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| "target/handoff-latency.svg".into());
    let sizes = Sizes::new(quick);
    // `--only handoff,commands,…`: a subset of the measures (the report shows what ran).
    let only: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(|l| l.split(',').map(str::to_owned).collect());
    let runs = |m: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == m));
    // Holder → waiter pairs of the hand-off: each kind with itself, and with `--swap` the
    // roles mixed (the same scripts and channel on the wire, so either side can be raw).
    let mut pairs = vec![
        (Impl::Raw, Impl::Raw),
        (Impl::Lockman, Impl::Lockman),
        (Impl::Rslock, Impl::Rslock),
    ];
    if args.iter().any(|a| a == "--swap") {
        pairs.extend([(Impl::Raw, Impl::Lockman), (Impl::Lockman, Impl::Raw)]);
    }

    let server = support::RedisServer::start();
    let url = server.url();
    eprintln!(
        "redis-server {} on {url}",
        server_version(&mut server.conn())
    );
    let system = actix_rt::System::new();
    let mut report = Report::default();

    let clients = system.block_on(Clients::connect(&url));

    if runs("handoff") {
        eprintln!(
            "hand-off latency: {} rounds of raw and lockman, rslock every {}th…",
            sizes.handoff_rounds, sizes.rslock_every
        );
        (report.handoffs, report.rtt) = system.block_on(handoffs(
            &clients,
            &pairs,
            sizes.handoff_rounds,
            sizes.rslock_every,
        ));
    }
    if runs("commands") {
        for imp in [Impl::Lockman, Impl::Rslock] {
            eprintln!("commands per hand-off, {}…", imp.name());
            let counted = system.block_on(commands_per_handoff(
                imp,
                &clients,
                &server,
                sizes.waiters,
                sizes.commands_handoffs,
            ));
            report.commands.push((imp, counted));
        }
    }
    if runs("watchdog") {
        eprintln!("watchdog with {} locks…", sizes.watchdog_locks);
        report.watchdog = Some(system.block_on(watchdog(&server, sizes.watchdog_locks)));
    }
    if runs("memory") {
        eprintln!("memory over {} names (fresh process)…", sizes.memory_names);
        report.memory = Some(memory(&url, sizes.memory_names));
    }
    if runs("contended") {
        for imp in [Impl::Lockman, Impl::Rslock] {
            eprintln!("contended throughput, {}…", imp.name());
            let rate = system.block_on(contended(
                imp,
                &clients,
                sizes.contended_tasks,
                sizes.contended_for,
            ));
            report.contended.push((imp, rate));
        }
    }

    print!("{}", report.markdown(&sizes));
    if !report.handoffs.is_empty() {
        match chart(&svg, &report) {
            Ok(()) => eprintln!("chart written to {svg}"),
            Err(e) => eprintln!("could not write the chart to {svg}: {e}"),
        }
    }
    drop(server);
}

// ---------------------------------------------------------------------------------------------
// Measures

/// Two single EVALSHA round trips (the acquire script on a free name, then the release
/// script), each timed on its own, on the connection kind lockman uses.
async fn round_trips(conn: &ConnectionManager) -> [Duration; 2] {
    let holder = "00000000-0000-4000-8000-000000000000:1";
    let t = Instant::now();
    raw::acquire(conn, "raw:rtt", holder).await;
    let acquire = t.elapsed();
    let t = Instant::now();
    raw::release(conn, "raw:rtt", holder).await;
    [acquire, t.elapsed()]
}

/// One hand-off between two processes: this one holds, the peer waits. Take the lock, tell the
/// peer to wait for it, let it settle, note the time and release; the peer notes when it got the
/// lock, releases, and reports.
async fn handoff_once(holder: &Holder, peer: &mut Peer) -> Duration {
    let held = holder.acquire().await;
    peer.send("go");
    tokio::time::sleep(SETTLE).await;
    let released_at = unix_nanos();
    held.release().await;
    let acquired_at: u128 = peer.line().parse().expect("peer time");
    Duration::from_nanos(acquired_at.saturating_sub(released_at) as u64)
}

/// Hand-off latencies of each holder → waiter pair (rslock's every `rslock_every`-th round:
/// each of its hand-offs sits out a retry sleep), and raw round trips, interleaved round by
/// round so that the machine's drift hits them alike. Each list sorted.
async fn handoffs(
    clients: &Clients,
    pairs: &[Pair],
    rounds: usize,
    rslock_every: usize,
) -> (Vec<(Pair, Vec<Duration>)>, Vec<Duration>) {
    let mut sides = Vec::new();
    for &(held_by, waited_by) in pairs {
        let name = format!("handoff:{}:{}", held_by.name(), waited_by.name());
        let peer = Peer::start(waited_by, &clients.url, &name);
        let holder = Holder::new(held_by, clients, &name).await;
        sides.push(((held_by, waited_by), holder, peer, Vec::new()));
    }
    let mut rtt = Vec::new();
    for _ in 0..20 {
        round_trips(&clients.raw).await; // warm-up
    }
    for round in 0..rounds {
        rtt.extend(round_trips(&clients.raw).await);
        for (imp, holder, peer, times) in &mut sides {
            if imp.0 != Impl::Rslock || round % rslock_every == 0 {
                times.push(handoff_once(holder, peer).await);
            }
        }
    }
    rtt.sort();
    let lists = sides
        .into_iter()
        .map(|(imp, _, peer, mut times)| {
            peer.finish();
            times.sort();
            (imp, times)
        })
        .collect();
    (lists, rtt)
}

/// The peer process of a hand-off: waits for the lock on each "go", prints when it got it
/// (Unix nanoseconds), releases. Runs until its stdin closes.
fn peer(imp: Impl, url: &str, name: &str) {
    actix_rt::System::new().block_on(async {
        let clients = Clients::connect(url).await;
        let holder = Holder::new(imp, &clients, name).await;
        println!("ready");
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            if line.expect("stdin") != "go" {
                continue;
            }
            let held = holder.acquire().await;
            let at = unix_nanos();
            held.release().await;
            println!("{at}");
        }
    });
}

struct Counted {
    handoffs: u64,
    /// Commands clients sent, by command.
    sent: Vec<(String, u64)>,
    /// Every command Redis executed, including those run inside scripts.
    executed: u64,
    took: Duration,
}

impl Counted {
    fn sent_total(&self) -> u64 {
        self.sent.iter().map(|(_, n)| n).sum()
    }
}

/// `waiters` tasks of one process loop acquire + release on one name until `handoffs`
/// acquisitions have happened (tasks already waiting finish their turn, and count).
async fn commands_per_handoff(
    imp: Impl,
    clients: &Clients,
    server: &support::RedisServer,
    waiters: usize,
    handoffs: u64,
) -> Counted {
    let name = format!("commands:{}", imp.name());
    let holders: Vec<Holder> =
        join_all((0..waiters).map(|_| Holder::new(imp, clients, &name))).await;
    // Connections are made and scripts loaded before the count starts.
    for h in &holders[..1] {
        h.acquire().await.release().await;
    }
    let mut conn = server.conn();
    support::commands::reset_stats(&mut conn);
    let start = Instant::now();
    let handoffs = take_turns(&holders, |n| n < handoffs).await;
    let took = start.elapsed();
    let stats = command_stats(&mut conn);
    let sent_by = |cmd: &str| match imp {
        Impl::Lockman | Impl::Raw => LOCKMAN_SENDS.contains(&cmd),
        Impl::Rslock => RSLOCK_SENDS.contains(&cmd),
    };
    Counted {
        handoffs,
        sent: stats.iter().filter(|(c, _)| sent_by(c)).cloned().collect(),
        executed: stats
            .iter()
            .filter(|(c, _)| !c.starts_with("config") && c != "info")
            .map(|(_, n)| n)
            .sum(),
        took,
    }
}

/// Commands each client sends itself (the rest in `INFO commandstats` run inside its scripts):
/// lockman's data commands all run in scripts; rslock sends SET and runs a script to unlock.
const LOCKMAN_SENDS: &[&str] = &[
    "evalsha",
    "eval",
    "script|load",
    "subscribe",
    "unsubscribe",
    "ping",
    "client|setinfo",
    "hello",
    "select",
];
const RSLOCK_SENDS: &[&str] = &[
    "set",
    "evalsha",
    "eval",
    "script|load",
    "ping",
    "client|setinfo",
    "hello",
    "select",
];

struct WatchdogRun {
    locks: usize,
    ticks: f64,
    renewals: u64,
    sent_per_sec: f64,
    executed_per_sec: f64,
    cpu_per_tick: Duration,
    lost: usize,
}

/// `locks` locks held without lease under a short watchdog timeout, for several ticks.
async fn watchdog(server: &support::RedisServer, locks: usize) -> WatchdogRun {
    let timeout = Duration::from_millis(900);
    let tick = timeout / 3;
    let config = Config::new(server.url()).watchdog_timeout(timeout);
    let manager = LockManager::start(config).await.expect("manager");
    let mut guards = Vec::with_capacity(locks);
    for chunk in (0..locks).collect::<Vec<_>>().chunks(500) {
        let taken = join_all(
            chunk
                .iter()
                .map(|i| manager.lock(format!("watchdog:{i}")))
                .map(|lock| async move { lock.acquire().await }),
        )
        .await;
        guards.extend(taken.into_iter().map(|g| g.expect("acquire")));
    }
    tokio::time::sleep(tick).await;
    let mut conn = server.conn();
    support::commands::reset_stats(&mut conn);
    let (cpu0, t0) = (cpu_time(), Instant::now());
    tokio::time::sleep(tick * 10).await;
    let (cpu, took) = (cpu_time() - cpu0, t0.elapsed());
    let stats = command_stats(&mut conn);
    let ticks = took.as_secs_f64() / tick.as_secs_f64();
    let get = |c: &str| stats.iter().find(|(n, _)| n == c).map_or(0, |(_, n)| *n);
    let executed: u64 = stats
        .iter()
        .filter(|(c, _)| !c.starts_with("config") && c != "info")
        .map(|(_, n)| n)
        .sum();
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    for g in guards {
        g.release().await.expect("release");
    }
    manager.shutdown().await;
    WatchdogRun {
        locks,
        ticks,
        renewals: get("evalsha"),
        sent_per_sec: (get("evalsha") + get("eval")) as f64 / took.as_secs_f64(),
        executed_per_sec: executed as f64 / took.as_secs_f64(),
        cpu_per_tick: cpu.div_f64(ticks),
        lost,
    }
}

struct MemoryRun {
    names: usize,
    rss_before_kb: u64,
    rss_after_kb: u64,
    live_actors: usize,
    per_name: Duration,
}

/// Runs the memory measure in a fresh process, so nothing measured before skews it.
fn memory(url: &str, names: usize) -> MemoryRun {
    let out = Command::new(std::env::current_exe().expect("exe"))
        .args(["memory", url, &names.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .expect("memory process");
    let text = String::from_utf8_lossy(&out.stdout);
    let f: Vec<u64> = text
        .split_whitespace()
        .map(|n| n.parse().expect("number"))
        .collect();
    MemoryRun {
        names,
        rss_before_kb: f[0],
        rss_after_kb: f[1],
        live_actors: f[2] as usize,
        per_name: Duration::from_nanos(f[3]),
    }
}

/// The memory process: acquires and releases `names` distinct names once each (32 at a time),
/// then waits for the lock actors to stop. Prints: RSS before and after (kB), live lock actors,
/// nanoseconds per name.
fn memory_role(url: &str, names: usize) {
    actix_rt::System::new().block_on(async {
        let manager = LockManager::connect(url).await.expect("manager");
        let once = |i: usize| {
            let lock = manager.lock(format!("memory:{i}"));
            async move { lock.acquire().await.expect("acquire").release().await }
        };
        // Warm-up: connections, scripts, the runtime's and allocator's first pools.
        for i in 0..1000 {
            once(names + i).await.expect("release");
        }
        support::wait::lock_actors_stop(&manager, Duration::from_secs(10)).await;
        let before = rss_kb();
        let start = Instant::now();
        let workers = 32;
        join_all((0..workers).map(|w| async move {
            for i in (w..names).step_by(workers) {
                once(i).await.expect("release");
            }
        }))
        .await;
        let per_name = start.elapsed() / names as u32;
        support::wait::lock_actors_stop(&manager, Duration::from_secs(10)).await;
        let live = manager.live_lock_actors().await;
        let after = rss_kb();
        println!("{before} {after} {live} {}", per_name.as_nanos());
    });
}

/// `loadgen renewals URL LOCKS ROUNDS [TIMEOUT_MS [unwatched]]`: LOCKS locks held without a
/// lease (watchdog timeout TIMEOUT_MS, 900 by default, so renewed every third of it; under
/// callgrind, which runs the process tens of times slower, use several seconds; and watched:
/// `Config::watch_holds` is on by default, off with `unwatched`). The measured window is
/// defined by counts, not by time: it opens halfway between two renewal rounds, once every
/// hold has been renewed, and closes halfway between two rounds ROUNDS rounds later; the
/// example prints the holds renewed within it (the server's `PEXPIRE` calls, read outside it)
/// and `exact` when that is ROUNDS × LOCKS, so that a window that caught a round partly, or
/// one renewal retried, is seen and not counted. Under callgrind
/// (`--zero-before='*renewal_window_opens*' --dump-before='*renewal_window_closes*'`) the
/// first dump holds the client's instructions within the window alone: divided by the holds
/// renewed, the instructions per renewal, the watch's cost within the window included.
fn renewals(url: &str, locks: usize, rounds: u32, timeout: Duration, watched: bool) {
    actix_rt::System::new().block_on(async {
        // Under callgrind the start takes seconds: the default connect timeout is too short.
        let config = Config::new(url)
            .watchdog_timeout(timeout)
            .connect_timeout(Duration::from_secs(60))
            .watch_holds(watched);
        let manager = LockManager::start(config).await.expect("manager");
        let mut guards = Vec::with_capacity(locks);
        for i in 0..locks {
            let lock = manager.lock(format!("renewals:{i}"));
            guards.push(lock.acquire().await.expect("acquire"));
        }
        let mut conn = redis::Client::open(url)
            .expect("url")
            .get_connection()
            .expect("conn");
        // Every hold old enough to be renewed, then halfway to the round after the next.
        tokio::time::sleep(timeout).await;
        let interval = timeout / 3;
        let round_began = next_round(&mut conn).await;
        let opens = round_began + interval + interval / 2;
        tokio::time::sleep_until(opens.into()).await;
        let before = pexpire_calls(&mut conn);
        renewal_window_opens();
        tokio::time::sleep_until((opens + interval * rounds).into()).await;
        renewal_window_closes();
        let renewed = pexpire_calls(&mut conn) - before;
        let lost = guards.iter().filter(|g| g.is_lost()).count();
        let expected = u64::from(rounds) * locks as u64;
        let exact = if renewed == expected {
            "exact"
        } else {
            "NOT exact"
        };
        println!("renewals {renewed} of {expected} ({exact}) lost {lost}");
        drop(guards);
        manager.shutdown().await;
    });
}

/// The server's `PEXPIRE` calls so far (one per hold renewed).
fn pexpire_calls(conn: &mut redis::Connection) -> u64 {
    command_stats(conn)
        .iter()
        .find(|(c, _)| c == "pexpire")
        .map_or(0, |(_, n)| *n)
}

/// When the next renewal round began (within the 5 ms of polling), once it has begun.
async fn next_round(conn: &mut redis::Connection) -> Instant {
    let before = pexpire_calls(conn);
    loop {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if pexpire_calls(conn) != before {
            return Instant::now();
        }
    }
}

/// Where callgrind zeroes its counts (`--zero-before`): never inlined, so that it is entered.
#[inline(never)]
fn renewal_window_opens() {
    std::hint::black_box(());
}

/// Where callgrind dumps its counts (`--dump-before`).
#[inline(never)]
fn renewal_window_closes() {
    std::hint::black_box(());
}

/// 64 tasks on 64 names, `iters` uncontended acquire + release pairs each (for callgrind).
fn pairs(imp: Impl, url: &str, iters: u64, request: bool, tasks: usize) {
    actix_rt::System::new().block_on(async {
        let clients = Clients::connect(url).await;
        join_all((0..tasks).map(|t| {
            let clients = &clients;
            async move {
                let (name, id) = (format!("pairs:{}:{t}", imp.name()), format!("pairs:{t}"));
                let reused = clients.lockman.lock(name.as_str());
                for _ in 0..iters {
                    let made;
                    let lock = if request {
                        made = clients.lockman.lock(name.as_str());
                        &made
                    } else {
                        &reused
                    };
                    match imp {
                        Impl::Raw => raw::pair(&clients.raw, &name, &id).await,
                        _ => lock
                            .acquire()
                            .await
                            .expect("acquire")
                            .release()
                            .await
                            .expect("release"),
                    }
                    if request {
                        tokio::task::yield_now().await;
                    }
                }
            }
        }))
        .await;
    });
}

/// `tasks` tasks take turns on one name until `count` acquisitions (for callgrind), each
/// holder **spawned as its own task**: a lock's waits and holds belong to the task that makes
/// them, so holders joined in one task would be one owner waiting for itself.
fn turns(imp: Impl, url: &str, count: u64, tasks: usize) {
    use std::rc::Rc;
    actix_rt::System::new().block_on(async {
        let clients = Clients::connect(url).await;
        let name = format!("turns:{}", imp.name());
        let holders: Vec<Holder> =
            join_all((0..tasks).map(|_| Holder::new(imp, &clients, &name))).await;
        holders[0].acquire().await.release().await; // connect, load scripts
        let (made, inside) = (Rc::new(Cell::new(0u64)), Rc::new(Cell::new(false)));
        let running: Vec<_> = holders
            .into_iter()
            .map(|h| {
                let (made, inside) = (made.clone(), inside.clone());
                actix_rt::spawn(async move {
                    while made.get() < count {
                        let held = h.acquire().await;
                        assert!(!inside.replace(true), "two holders at once");
                        made.set(made.get() + 1);
                        inside.set(false);
                        held.release().await;
                    }
                })
            })
            .collect();
        for task in running {
            task.await.expect("holder task");
        }
        println!("{}", made.get());
    });
}

/// `tasks` tasks loop acquire + release on one name for `run`; acquisitions per second.
async fn contended(imp: Impl, clients: &Clients, tasks: usize, run: Duration) -> (u64, f64) {
    let name = format!("contended:{}", imp.name());
    let holders: Vec<Holder> = join_all((0..tasks).map(|_| Holder::new(imp, clients, &name))).await;
    holders[0].acquire().await.release().await; // connect, load scripts
    let start = Instant::now();
    let n = take_turns(&holders, |_| start.elapsed() < run).await;
    (n, n as f64 / start.elapsed().as_secs_f64())
}

/// Every holder loops acquire + release on their one name while `more(acquisitions so far)`,
/// checking that no two hold it at once; returns the number of acquisitions. The holders are
/// joined in one task, so each runs in a deadlock scope of its own: as one owner, a holder's
/// waits would be waits for itself, which lockman reports as a deadlock.
async fn take_turns(holders: &[Holder], more: impl Fn(u64) -> bool) -> u64 {
    let (count, inside) = (Cell::new(0u64), Cell::new(false));
    join_all(holders.iter().map(|h| {
        let (count, inside, more) = (&count, &inside, &more);
        lockman::deadlock::scope(lockman::deadlock::Owner::new(), async move {
            while more(count.get()) {
                let held = h.acquire().await;
                assert!(!inside.replace(true), "two holders at once");
                count.set(count.get() + 1);
                inside.set(false);
                held.release().await;
            }
        })
    }))
    .await;
    count.get()
}

// ---------------------------------------------------------------------------------------------
// The implementations behind one face

/// What a process's holders are made from: one client of each kind per process, shared by all
/// its holders, as a service would.
struct Clients {
    url: String,
    lockman: LockManager,
    /// rslock with its defaults (one connection); clones share it, each lock gets its own value.
    rslock: rslock::LockManager,
    raw: ConnectionManager,
}

impl Clients {
    async fn connect(url: &str) -> Self {
        let lockman = LockManager::connect(url).await.expect("lockman manager");
        let raw = raw::connect(url).await;
        Self {
            url: url.to_owned(),
            lockman,
            rslock: rslock::LockManager::new(vec![url]),
            raw,
        }
    }
}

enum Holder {
    Lockman(lockman::Lock),
    Rslock(rslock::LockManager, String),
    Raw(Box<RawHolder>),
}

enum Held {
    Lockman(lockman::LockGuard),
    Rslock(rslock::LockGuard),
    Raw(RawRelease),
}

struct RawRelease {
    conn: ConnectionManager,
    name: String,
    id: String,
}

/// A raw holder: its own id, the shared connection, and a pub/sub connection of its own.
struct RawHolder {
    name: String,
    id: String,
    conn: ConnectionManager,
    messages: tokio::sync::Mutex<redis::aio::PubSubStream>,
}

impl Holder {
    /// A new holder identity on `name`: lockman, a handle of this process's one manager; rslock,
    /// this process's one manager (every lock it takes has a value of its own); raw, a pub/sub
    /// connection of its own.
    async fn new(imp: Impl, clients: &Clients, name: &str) -> Self {
        match imp {
            Impl::Lockman => Holder::Lockman(clients.lockman.lock(name)),
            Impl::Rslock => Holder::Rslock(clients.rslock.clone(), name.to_owned()),
            Impl::Raw => {
                let client = redis::Client::open(clients.url.as_str()).expect("url");
                let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
                pubsub
                    .subscribe(raw::channel(name))
                    .await
                    .expect("subscribe");
                Holder::Raw(Box::new(RawHolder {
                    name: name.to_owned(),
                    id: format!("{}:raw", uuid_like()),
                    conn: clients.raw.clone(),
                    messages: tokio::sync::Mutex::new(pubsub.into_on_message()),
                }))
            }
        }
    }

    async fn acquire(&self) -> Held {
        match self {
            Holder::Lockman(lock) => Held::Lockman(lock.acquire().await.expect("acquire")),
            Holder::Rslock(mgr, name) => Held::Rslock(
                mgr.acquire(name.as_str(), RSLOCK_TTL)
                    .await
                    .expect("acquire"),
            ),
            Holder::Raw(raw) => raw.acquire().await,
        }
    }
}

impl RawHolder {
    /// Attempt; when busy, wait for the next unlock message (or the TTL) and attempt again.
    async fn acquire(&self) -> Held {
        use futures_util::StreamExt;
        let mut messages = self.messages.lock().await;
        loop {
            let Some(ttl) = raw::acquire(&self.conn, &self.name, &self.id).await else {
                return Held::Raw(RawRelease {
                    conn: self.conn.clone(),
                    name: self.name.clone(),
                    id: self.id.clone(),
                });
            };
            let _ = tokio::time::timeout(Duration::from_millis(ttl), messages.next()).await;
        }
    }
}

impl Held {
    async fn release(self) {
        match self {
            Held::Lockman(guard) => guard.release().await.expect("release"),
            Held::Rslock(guard) => guard.release().await,
            Held::Raw(r) => {
                raw::release(&r.conn, &r.name, &r.id).await;
            }
        }
    }
}

/// A unique-enough holder id for the raw baseline.
fn uuid_like() -> String {
    format!("raw-{}-{}", std::process::id(), unix_nanos())
}

/// A hand-off peer process, spoken to line by line.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Peer {
    fn start(imp: Impl, url: &str, name: &str) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("exe"))
            .args(["peer", imp.name(), url, name])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("peer process");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut peer = Self {
            child,
            stdin,
            stdout,
        };
        assert_eq!(peer.line(), "ready");
        peer
    }

    fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("to peer");
        self.stdin.flush().expect("to peer");
    }

    /// The peer's next line (blocking: the holder side has nothing else to do meanwhile).
    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("from peer");
        line.trim().to_owned()
    }

    fn finish(self) {
        let Self {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let _ = child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// Readings

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos()
}

/// CPU time of this process so far: the sum of its threads' run time (`/proc/self/task/*/schedstat`).
fn cpu_time() -> Duration {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task")
        .expect("/proc")
        .flatten()
    {
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        total += stat
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Duration::from_nanos(total)
}

/// Resident memory of this process (kB), from `/proc/self/status`.
fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .expect("/proc/self/status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

// ---------------------------------------------------------------------------------------------
// The report

#[derive(Default)]
struct Report {
    rtt: Vec<Duration>,
    handoffs: Vec<(Pair, Vec<Duration>)>,
    commands: Vec<(Impl, Counted)>,
    watchdog: Option<WatchdogRun>,
    memory: Option<MemoryRun>,
    contended: Vec<(Impl, (u64, f64))>,
}

fn pct(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

impl Report {
    fn markdown(&self, sizes: &Sizes) -> String {
        let mut s = String::new();
        if !self.handoffs.is_empty() {
            let rtt = pct(&self.rtt, 0.5);
            let _ = writeln!(
                s,
                "\n### Raw EVALSHA round trip (sampled between hand-off rounds)\n\n\
                 median {:.0} µs, p99 {:.0} µs ({} calls)\n",
                us(rtt),
                us(pct(&self.rtt, 0.99)),
                self.rtt.len()
            );
            let _ = writeln!(
                s,
                "### Hand-off latency (holder and waiter in two processes)\n\n\
                 | | hand-offs | p50 | p90 | p99 | max | p50 / raw round trip | p50 / raw hand-off |\n|---|---|---|---|---|---|---|---|"
            );
            let floor = self
                .handoffs
                .iter()
                .find(|(p, _)| *p == (Impl::Raw, Impl::Raw))
                .map_or(Duration::ZERO, |(_, h)| pct(h, 0.5));
            for (pair, h) in &self.handoffs {
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.0} µs | {:.0} µs | {:.0} µs | {:.0} µs | {:.2} | {:.2} |",
                    pair_name(*pair),
                    h.len(),
                    us(pct(h, 0.5)),
                    us(pct(h, 0.9)),
                    us(pct(h, 0.99)),
                    us(pct(h, 1.0)),
                    us(pct(h, 0.5)) / us(rtt),
                    us(pct(h, 0.5)) / us(floor)
                );
            }
        }
        if !self.commands.is_empty() {
            let _ = writeln!(
                s,
                "\n### Redis commands per hand-off ({} tasks on one name, one process)\n\n\
                 | | hand-offs | sent per hand-off | executed per hand-off (with script internals) | sent, by command | hand-offs/s |\n|---|---|---|---|---|---|",
                sizes.waiters
            );
            for (imp, c) in &self.commands {
                let by: Vec<String> = c.sent.iter().map(|(n, k)| format!("{n} {k}")).collect();
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.2} | {:.2} | {} | {:.0} |",
                    imp.name(),
                    c.handoffs,
                    c.sent_total() as f64 / c.handoffs as f64,
                    c.executed as f64 / c.handoffs as f64,
                    by.join(", "),
                    c.handoffs as f64 / c.took.as_secs_f64()
                );
            }
        }
        if let Some(w) = &self.watchdog {
            let _ = writeln!(
                s,
                "\n### Watchdog at scale ({} locks held without lease, watchdog timeout 900 ms)\n\n\
                 | ticks observed | renewal round trips per tick | commands sent/s | commands executed/s | CPU per tick | locks lost |\n|---|---|---|---|---|---|\n\
                 | {:.1} | {:.1} | {:.0} | {:.0} | {:.1} ms | {} |",
                w.locks,
                w.ticks,
                w.renewals as f64 / w.ticks,
                w.sent_per_sec,
                w.executed_per_sec,
                w.cpu_per_tick.as_secs_f64() * 1e3,
                w.lost
            );
        }
        if let Some(m) = &self.memory {
            let _ = writeln!(
                s,
                "\n### Memory ({} distinct names, each acquired and released once, fresh process)\n\n\
                 | RSS before | RSS after | growth | live lock actors after | time per name |\n|---|---|---|---|---|\n\
                 | {:.1} MB | {:.1} MB | {:+.1} MB | {} | {:.0} µs |",
                m.names,
                m.rss_before_kb as f64 / 1024.0,
                m.rss_after_kb as f64 / 1024.0,
                (m.rss_after_kb as f64 - m.rss_before_kb as f64) / 1024.0,
                m.live_actors,
                us(m.per_name)
            );
        }
        if self.contended.is_empty() {
            return s;
        }
        let _ = writeln!(
            s,
            "\n### Contended throughput ({} tasks on one name, {:?} each)\n\n\
             | | acquisitions | acquisitions/s | vs rslock |\n|---|---|---|---|",
            sizes.contended_tasks, sizes.contended_for
        );
        let base = self
            .contended
            .iter()
            .find(|(i, _)| *i == Impl::Rslock)
            .map_or(f64::NAN, |(_, (_, r))| *r);
        for (imp, (n, rate)) in &self.contended {
            let _ = writeln!(
                s,
                "| {} | {n} | {rate:.0} | {:.2} |",
                imp.name(),
                rate / base
            );
        }
        s
    }
}

/// The hand-off latency distributions as cumulative curves on a log scale.
fn chart(path: &str, report: &Report) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    if let Some(dir) = std::path::Path::new(path).parent() {
        std::fs::create_dir_all(dir)?;
    }
    let ms = |d: &Duration| d.as_secs_f64() * 1e3;
    let all = report.handoffs.iter().flat_map(|(_, h)| h.iter().map(ms));
    let (lo, hi) = all.fold((f64::MAX, 0f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let rtt = ms(&pct(&report.rtt, 0.5));
    let (lo, hi) = ((lo.min(rtt) * 0.7).max(0.01), (hi * 1.5).max(1.0));
    let root = SVGBackend::new(path, (860, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Hand-off latency: holder releases in one process, waiter acquires in another",
            ("sans-serif", 18),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..1f64)?;
    chart
        .configure_mesh()
        .x_desc("hand-off latency, ms (log scale)")
        .y_desc("share of hand-offs at most this long")
        .y_label_formatter(&|y| format!("{:.0}%", y * 100.0))
        .draw()?;
    for (pair, h) in &report.handoffs {
        let (color, what) = match pair {
            (Impl::Raw, Impl::Raw) => (RGBColor(136, 34, 85), "raw redis-rs, the floor".into()),
            (Impl::Lockman, Impl::Lockman) => (RGBColor(0, 114, 178), "lockman".into()),
            (Impl::Rslock, Impl::Rslock) => (RGBColor(213, 94, 0), "rslock, its defaults".into()),
            (Impl::Raw, _) => (RGBColor(86, 180, 233), pair_name(*pair)),
            _ => (RGBColor(230, 159, 0), pair_name(*pair)),
        };
        let n = h.len() as f64;
        let label = format!("{what} (p50 {:.2} ms)", ms(&pct(h, 0.5)));
        chart
            .draw_series(LineSeries::new(
                h.iter()
                    .enumerate()
                    .map(|(i, d)| (ms(d), (i + 1) as f64 / n)),
                color.stroke_width(2),
            ))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    for (x, label, color) in [
        (
            rtt,
            format!("raw EVALSHA round trip ({rtt:.2} ms)"),
            RGBColor(0, 0, 0),
        ),
        (
            3.0 * rtt,
            "3 × round trip (target for p50)".to_owned(),
            RGBColor(0, 158, 115),
        ),
    ] {
        chart
            .draw_series(LineSeries::new([(x, 0.0), (x, 1.0)], color.stroke_width(1)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::Coordinate(300, 60))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
