//! Counts behind BENCHMARKS.md's "The design's floor (issue 60)": CPU instructions and
//! allocations of an uncontended acquire + release, for lockman, the design's floor (a trivial
//! actor per name running the same scripts, `benches/common/floor.rs`) and raw redis-rs
//! (`benches/common/raw.rs`), counted so that the machine's load does not move them.
//!
//! `pair_cost <lockman|floor|raw|rawcmd> URL PAIRS [tight|request] [unwatched]` runs one task inside an
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

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, url, pairs, rest @ ..] = args.as_slice() else {
        eprintln!(
            "usage: pair_cost <lockman|floor|raw|rawcmd> URL PAIRS [tight|request] [unwatched]"
        );
        std::process::exit(2);
    };
    let pairs: u64 = pairs.parse().expect("PAIRS: a number");
    let request = match rest.first().map(String::as_str) {
        None | Some("tight") => false,
        Some("request") => true,
        Some(other) => panic!("unknown pattern {other:?}"),
    };
    let watched = rest.get(1).map(String::as_str) != Some("unwatched");
    let client = redis::Client::open(url.as_str()).expect("valid url");
    actix_rt::System::new().block_on(async move {
        match mode.as_str() {
            "lockman" => lockman(url, pairs, request, watched).await,
            "floor" => floor(client, pairs, request).await,
            "raw" | "rawcmd" => raw(client, pairs, request, mode == "rawcmd").await,
            other => panic!("unknown mode {other:?}"),
        }
    });
    println!(
        "mode {mode} pairs {pairs} allocations {}",
        counting::allocations()
    );
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
