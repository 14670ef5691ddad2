//! Counts behind BENCHMARKS.md's "The design's floor (issue 60)": CPU instructions and
//! allocations of an uncontended acquire + release, for lockman, the design's floor (a trivial
//! actor per name running the same scripts, `benches/common/floor.rs`) and raw redis-rs
//! (`benches/common/raw.rs`), counted so that the machine's load does not move them.
//!
//! `pair_cost <lockman|floor|raw|rawcmd> URL PAIRS [tight|request|many] [unwatched]` runs one task inside an
//! actix System: PAIRS acquire + release pairs on one name, after a fixed set-up. `tight` reuses
//! one handle (lockman's `Lock`, the floor actor's address); `request` is a web handler's
//! pattern: a handle made per pair (`manager.lock(name)`, the floor's directory lookup) and the
//! name idle between pairs (one yield, every mode). `raw` sends the scripts through redis-rs's
//! `ScriptInvocation`, `rawcmd` as presized commands (as lockman and the floor do). `unwatched`
//! starts lockman with `Config::watch_holds(false)`: a watched hold still held 20 ms after its
//! grant is handed to the Watchdog, which under callgrind's slowdown some pairs reach and some
//! do not (a count that moves with load); unwatched, a hold is handed over only after a sixth of
//! the watchdog timeout (5 s), which no pair reaches.
//!
//! `many` (issue 60's 64 tasks on 64 names, `benches/throughput.rs`'s load): [`TASKS`] tasks
//! inside the one actix System, each looping acquire + release on a name of its own (a kept
//! handle each: lockman's `Lock`, the floor actor's address, raw's name), all at once on one
//! manager, one directory, one connection. PAIRS is then the total over the tasks (a multiple
//! of [`TASKS`]), so the difference over two runs divided by the difference of PAIRS is again
//! the cost of one pair, read beside the single task's: what 64 names live at once add.
//!
//! `pair_cost <wait-lockman|wait-raw> URL ACQUISITIONS` counts a **contended** acquisition
//! instead (issue 60 item 3): every acquisition has to wait, woken by the unlock message of a
//! holder in another process. A child process (`pair_cost holder URL NAME`, started by the run,
//! not traced by callgrind, which follows no child unless told to) takes the lock by raw EVALSHA,
//! says so, and releases it (publishing the unlock message) once this process waits for it: its
//! channel has a subscriber and no EVALSHA came for [`SETTLED`] after at least one more attempt
//! than its own. This process then acquires (the failed attempt, the subscription if the waiter
//! has none, the wait, the wake, the attempt that gets it) and releases. `wait-lockman` is a
//! lockman `Lock` (holds unwatched, as above); `wait-raw` the raw waiter of the load generator's
//! hand-off (a pub/sub connection of its own, subscribed once; attempt, wait for the next message,
//! attempt again; its own release's message, which it hears too, taken before the next wait).
//! The child reports on stderr how many attempts it saw before each release.
//!
//! It prints the allocations the whole process made (a counting global allocator). Under
//! `valgrind --tool=callgrind` the instruction total comes from callgrind. Either count at two
//! values of PAIRS, differenced and divided by the difference, is the cost of one pair: set-up,
//! connection and exit cancel out.

#[path = "../benches/common/counting.rs"]
mod counting;
#[path = "../benches/common/floor.rs"]
mod floor;
#[path = "../benches/common/raw.rs"]
mod raw;

/// Pairs run before the counted ones in every run (connections warm, scripts loaded, actors
/// started): the same in both runs of a difference, so they cancel with the rest of the set-up.
const WARM_UP: u64 = 50;

/// Tasks, each on a name of its own, in the `many` pattern: the throughput bench's 64.
const TASKS: u64 = 64;

/// How long the holder child waits after the waiter's last attempt before it releases: the
/// waiter is then at rest in its wait (its attempts, and a lockman waiter's subscription, done),
/// even under callgrind's slowdown on a loaded machine.
const SETTLED: std::time::Duration = std::time::Duration::from_millis(40);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, url, pairs, rest @ ..] = args.as_slice() else {
        eprintln!(
            "usage: pair_cost <lockman|floor|raw|rawcmd> URL PAIRS [tight|request|many] [unwatched]\n       \
             pair_cost <wait-lockman|wait-raw> URL ACQUISITIONS"
        );
        std::process::exit(2);
    };
    if mode == "holder" {
        // The child of a `wait-*` run: `pairs` is the name here.
        return actix_rt::System::new().block_on(holder(url, pairs));
    }
    let pairs: u64 = pairs.parse().expect("PAIRS: a number");
    let pattern = match rest.first().map(String::as_str) {
        None | Some("tight") => Pattern::Tight,
        Some("request") => Pattern::Request,
        Some("many") => Pattern::Many,
        Some(other) => panic!("unknown pattern {other:?}"),
    };
    let request = pattern == Pattern::Request;
    let watched = rest.get(1).map(String::as_str) != Some("unwatched");
    let client = redis::Client::open(url.as_str()).expect("valid url");
    actix_rt::System::new().block_on(async move {
        match mode.as_str() {
            "lockman" if pattern == Pattern::Many => lockman_many(url, pairs, watched).await,
            "floor" if pattern == Pattern::Many => floor_many(client, pairs).await,
            "raw" | "rawcmd" if pattern == Pattern::Many => {
                raw_many(client, pairs, mode == "rawcmd").await
            }
            "lockman" => lockman(url, pairs, request, watched).await,
            "floor" => floor(client, pairs, request).await,
            "raw" | "rawcmd" => raw(client, pairs, request, mode == "rawcmd").await,
            "wait-lockman" => wait_lockman(url, pairs).await,
            "wait-raw" => wait_raw(client, url, pairs).await,
            other => panic!("unknown mode {other:?}"),
        }
    });
    println!(
        "mode {mode} pairs {pairs} allocations {}",
        counting::allocations()
    );
}

/// How the pairs are run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pattern {
    /// One task, one kept handle.
    Tight,
    /// One task, a handle per pair, the name idle between pairs.
    Request,
    /// [`TASKS`] tasks at once, each a kept handle on a name of its own.
    Many,
}

/// Pairs each of the [`TASKS`] tasks runs, warm-up included, for `pairs` counted in all.
fn per_task(pairs: u64) -> u64 {
    assert_eq!(pairs % TASKS, 0, "PAIRS: a multiple of {TASKS} with `many`");
    WARM_UP + pairs / TASKS
}

async fn lockman_many(url: &str, pairs: u64, watched: bool) {
    let config = lockman::Config::new(url).watch_holds(watched);
    let manager = lockman::LockManager::start(config).await.expect("manager");
    let locks: Vec<_> = (0..TASKS)
        .map(|t| manager.lock(format!("many:{t}")))
        .collect();
    futures_util::future::join_all(locks.iter().map(|lock| async move {
        for _ in 0..per_task(pairs) {
            lockman_pair(lock).await;
        }
    }))
    .await;
    manager.shutdown().await;
}

async fn floor_many(client: redis::Client, pairs: u64) {
    let floors = floor::Floors::here(client).await;
    let actors: Vec<_> = (0..TASKS)
        .map(|t| floors.actor(&format!("many-f:{t}")))
        .collect();
    futures_util::future::join_all(actors.iter().map(|actor| async move {
        for _ in 0..per_task(pairs) {
            floor::pair(actor).await;
        }
    }))
    .await;
}

async fn raw_many(client: redis::Client, pairs: u64, cmd: bool) {
    let conn = raw::connect_client(client).await;
    raw::load(&conn).await;
    let conn = &conn;
    futures_util::future::join_all((0..TASKS).map(|t| async move {
        let (name, holder) = (
            format!("many-r:{t}"),
            format!("00000000-0000-4000-8000-00000000c057:{t}"),
        );
        let channel = raw::channel(&name);
        for _ in 0..per_task(pairs) {
            if cmd {
                raw::pair_cmd(conn, &name, &channel, &holder).await;
            } else {
                raw::pair(conn, &name, &holder).await;
            }
        }
    }))
    .await;
}

async fn lockman(url: &str, pairs: u64, request: bool, watched: bool) {
    let config = lockman::Config::new(url).watch_holds(watched);
    let manager = lockman::LockManager::start(config).await.expect("manager");
    let kept = manager.lock("cost");
    for _ in 0..WARM_UP + pairs {
        if request {
            lockman_pair(&manager.lock("cost")).await;
            tokio::task::yield_now().await;
        } else {
            lockman_pair(&kept).await;
        }
    }
    manager.shutdown().await;
}

async fn lockman_pair(lock: &lockman::Lock) {
    let guard = lock.acquire().await.expect("acquire");
    guard.release().await.expect("release");
}

async fn floor(client: redis::Client, pairs: u64, request: bool) {
    let floors = floor::Floors::here(client).await;
    let kept = floors.actor("cost-f");
    for _ in 0..WARM_UP + pairs {
        if request {
            floor::pair(&floors.actor("cost-f")).await;
            tokio::task::yield_now().await;
        } else {
            floor::pair(&kept).await;
        }
    }
}

async fn raw(client: redis::Client, pairs: u64, request: bool, cmd: bool) {
    let conn = raw::connect_client(client).await;
    raw::load(&conn).await;
    let (name, holder) = ("cost-r", "00000000-0000-4000-8000-00000000c057:1");
    let channel = raw::channel(name);
    for _ in 0..WARM_UP + pairs {
        if cmd {
            raw::pair_cmd(&conn, name, &channel, holder).await;
        } else {
            raw::pair(&conn, name, holder).await;
        }
        if request {
            tokio::task::yield_now().await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Contended acquisitions: a holder in a child process, the waiter here.

/// The holder child, spoken to line by line.
struct Holder {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Holder {
    fn start(url: &str, name: &str) -> Self {
        use std::process::{Command, Stdio};
        let mut child = Command::new(std::env::current_exe().expect("exe"))
            .args(["holder", url, name])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("holder process");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        Self {
            child,
            stdin,
            stdout,
        }
    }

    /// Has the child take the lock; returns once it holds it. It releases on its own once
    /// this process waits.
    fn hold(&mut self) {
        use std::io::{BufRead, Write};
        writeln!(self.stdin, "hold").expect("to holder");
        self.stdin.flush().expect("to holder");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("from holder");
        assert_eq!(line.trim(), "held", "holder child");
    }

    fn finish(self) {
        drop(self.stdin);
        let mut child = self.child;
        let _ = child.wait();
    }
}

async fn wait_lockman(url: &str, acquisitions: u64) {
    let config = lockman::Config::new(url).watch_holds(false);
    let manager = lockman::LockManager::start(config).await.expect("manager");
    let lock = manager.lock("wait");
    let mut holder = Holder::start(url, "wait");
    for _ in 0..WARM_UP + acquisitions {
        holder.hold();
        lockman_pair(&lock).await;
    }
    holder.finish();
    manager.shutdown().await;
}

async fn wait_raw(client: redis::Client, url: &str, acquisitions: u64) {
    use futures_util::StreamExt;
    let conn = raw::connect_client(client.clone()).await;
    let (name, id) = ("wait-r", "00000000-0000-4000-8000-00000000c057:1");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub
        .subscribe(raw::channel(name))
        .await
        .expect("subscribe");
    let mut messages = pubsub.into_on_message();
    let mut holder = Holder::start(url, name);
    for _ in 0..WARM_UP + acquisitions {
        holder.hold();
        // The load generator's raw waiter: attempt; when taken, wait for the next message (or
        // the TTL) and attempt again.
        while let Some(ttl) = raw::acquire(&conn, name, id).await {
            let wait = std::time::Duration::from_millis(ttl);
            let _ = tokio::time::timeout(wait, messages.next()).await;
        }
        assert_eq!(raw::release(&conn, name, id).await, Some(1));
        // Its own release's message comes to it too: taken now, lest it wake the next wait at
        // once, for one more attempt that a waiter of another process would not make.
        let _ = tokio::time::timeout(SETTLED, messages.next()).await;
    }
    holder.finish();
}

/// The holder child: on each `hold`, takes `name` by raw EVALSHA (under an id of its own),
/// answers `held`, waits until the waiter waits (see [`SETTLED`]) and releases, which publishes
/// the unlock message. At the end, on stderr: how many attempts it saw before its releases.
async fn holder(url: &str, name: &str) {
    use std::io::BufRead;
    let conn = raw::connect(url).await;
    let mut info = redis::Client::open(url)
        .expect("url")
        .get_connection()
        .expect("info connection");
    let id = "00000000-0000-4000-8000-0000000c0de1:1";
    let channel = raw::channel(name);
    let mut seen = std::collections::BTreeMap::<u64, u64>::new();
    for line in std::io::stdin().lock().lines() {
        if line.expect("stdin") != "hold" {
            continue;
        }
        while raw::acquire(&conn, name, id).await.is_some() {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let before = evalsha_calls(&mut info);
        println!("held");
        let (mut last, mut since) = (before, std::time::Instant::now());
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            let calls = evalsha_calls(&mut info);
            if calls != last {
                (last, since) = (calls, std::time::Instant::now());
                continue;
            }
            if calls > before && subscribers(&mut info, &channel) > 0 && since.elapsed() >= SETTLED
            {
                break;
            }
        }
        *seen.entry(last - before).or_default() += 1;
        assert_eq!(raw::release(&conn, name, id).await, Some(1));
    }
    eprintln!("holder: attempts seen before each release (attempts: times) {seen:?}");
}

/// EVALSHA calls the server has run (every client's).
fn evalsha_calls(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Subscribers of `channel`.
fn subscribers(conn: &mut redis::Connection, channel: &str) -> u64 {
    let reply: (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(conn)
        .expect("PUBSUB NUMSUB");
    reply.1
}
