//! Turns across processes (issue 57): after a streak of local hand-offs, a plain lock's release
//! publishes, and this manager's own waiters hold back a moment so that a waiter another process
//! woke by that message takes the lock. Two child processes with many waiters each contend on
//! one name for a fixed count of acquisitions: each gets a fair share, and no wait runs out.

mod support;

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use lockman::{Config, LockManager};
use redis::Commands;
use support::RedisServer;

/// The environment variable that makes `child_contends` run (with the server's URL).
const CHILD_URL: &str = "LOCKMAN_TEST_TURNS_CHILD_URL";
/// The lock's name, and the counters kept under it in Redis.
const NAME: &str = "turns";
const TAKEN: &str = "turns:taken";
const INSIDE: &str = "turns:inside";
/// Acquisitions over both processes.
const TOTAL: u64 = 600;
/// Waiters in each process.
const TASKS: usize = 8;
/// Each wait's bound: none may run out.
const WAIT: Duration = Duration::from_secs(20);

/// One child process: `TASKS` tasks loop on the lock until `TOTAL` acquisitions were counted
/// over both processes. Under the lock each counts itself in `INSIDE` (exclusion: always 1) and
/// takes a number from `TAKEN`. Prints `READY` once every task waits, then
/// `COUNT <acquisitions> <timeouts> <overlaps>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of two_processes_take_turns_after_hand_off_streaks"]
async fn child_contends() {
    let url = std::env::var(CHILD_URL).expect("run by the parent test");
    let mgr = LockManager::start(Config::new(url.as_str()))
        .await
        .expect("manager starts");
    let client = redis::Client::open(url.as_str()).unwrap();
    let started = Arc::new(tokio::sync::Barrier::new(TASKS + 1));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let lock = mgr.lock(NAME);
            let client = client.clone();
            let started = started.clone();
            tokio::spawn(async move {
                let mut conn = client.get_multiplexed_async_connection().await.unwrap();
                let (mut count, mut timeouts, mut overlaps) = (0u64, 0u64, 0u64);
                let mut first = Some(started);
                loop {
                    let got = match first.take() {
                        Some(started) => {
                            // This task's first wait is under way (the parent holds the lock)
                            // before the child says it is ready.
                            let waiting = lock.try_acquire_for(WAIT);
                            tokio::pin!(waiting);
                            tokio::select! {
                                biased;
                                got = &mut waiting => panic!("the parent holds the lock: {got:?}"),
                                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                            }
                            started.wait().await;
                            waiting.await
                        }
                        None => lock.try_acquire_for(WAIT).await,
                    };
                    if !step(got, &mut conn, &mut count, &mut timeouts, &mut overlaps).await {
                        break;
                    }
                }
                (count, timeouts, overlaps)
            })
        })
        .collect();
    started.wait().await;
    println!("READY");
    let (mut count, mut timeouts, mut overlaps) = (0, 0, 0);
    for t in tasks {
        let (c, t, o) = t.await.unwrap();
        count += c;
        timeouts += t;
        overlaps += o;
    }
    println!("COUNT {count} {timeouts} {overlaps}");
    mgr.shutdown().await;
}

/// One wait's outcome: counted under the lock, released. Whether to go on.
async fn step(
    got: Result<Option<lockman::LockGuard>, lockman::LockError>,
    conn: &mut redis::aio::MultiplexedConnection,
    count: &mut u64,
    timeouts: &mut u64,
    overlaps: &mut u64,
) -> bool {
    let guard = match got {
        Ok(Some(guard)) => guard,
        Ok(None) => {
            *timeouts += 1;
            return true;
        }
        Err(e) => panic!("a wait failed: {e:?}"),
    };
    let inside: i64 = redis::AsyncCommands::incr(conn, INSIDE, 1).await.unwrap();
    if inside != 1 {
        *overlaps += 1;
    }
    let n: u64 = redis::AsyncCommands::incr(conn, TAKEN, 1).await.unwrap();
    let _: i64 = redis::AsyncCommands::decr(conn, INSIDE, 1).await.unwrap();
    guard.release().await.unwrap();
    if n <= TOTAL {
        *count += 1;
    }
    n < TOTAL
}

/// The far child's delay each way to Redis: its waiters hear each message a millisecond after
/// the near child's, and their attempts arrive a millisecond later again.
const FAR: Duration = Duration::from_millis(1);

/// A TCP proxy on loopback to `target` that delivers every byte `delay` after it came, each
/// way and in order: a client this far from Redis. Runs on a thread and runtime of its own for
/// the rest of the test process.
fn far_proxy(target: SocketAddr, delay: Duration) -> SocketAddr {
    use tokio::net::{TcpListener, TcpStream};
    let (ready, addr) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the proxy's runtime");
        runtime.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            ready.send(listener.local_addr().unwrap()).unwrap();
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = (client.set_nodelay(true), server.set_nodelay(true));
                    let (client_in, client_out) = client.into_split();
                    let (server_in, server_out) = server.into_split();
                    tokio::spawn(delayed(client_in, server_out, delay));
                    tokio::spawn(delayed(server_in, client_out, delay));
                });
            }
        });
    });
    addr.recv().expect("the proxy listens")
}

/// Copies `from` to `to`, each chunk `delay` after it was read.
async fn delayed(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((at, bytes)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n @ 1..) = from.read(&mut buf).await {
        let at = tokio::time::Instant::now() + delay;
        if tx.send((at, buf[..n].to_vec())).is_err() {
            break;
        }
    }
    drop(tx);
    let _ = writer.await;
}

struct Child {
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl Child {
    fn spawn(url: &str) -> Self {
        let exe = std::env::current_exe().expect("test binary");
        let mut child = Command::new(exe)
            .args(["--ignored", "--exact", "child_contends", "--nocapture"])
            .env(CHILD_URL, url)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the child");
        let out = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
        Self { child, out }
    }

    fn ready(&mut self) {
        use std::io::BufRead;
        let mut line = String::new();
        while self.out.read_line(&mut line).expect("child output") > 0 {
            if line.starts_with("READY") {
                return;
            }
            line.clear();
        }
        panic!("the child ended before it was ready");
    }

    /// `(acquisitions, timeouts, overlaps)`, once the child ended.
    fn counts(mut self) -> (u64, u64, u64) {
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).expect("child output");
        assert!(self.child.wait().unwrap().success(), "the child failed");
        let line = rest
            .lines()
            .find_map(|l| l.strip_prefix("COUNT "))
            .unwrap_or_else(|| panic!("no count in {rest:?}"));
        let n: Vec<u64> = line
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        (n[0], n[1], n[2])
    }
}

/// Two processes with `TASKS` waiters each take one plain lock `TOTAL` times in all, one of
/// them a millisecond farther from Redis. A release after a streak of 8 local hand-offs
/// publishes; without the hold-back, the near process's waiters, woken by that message first,
/// won the lock again nearly every time (the far one took a handful of 600). With it each
/// process gets at least a quarter, no wait runs out, and the lock is never held twice at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_take_turns_after_hand_off_streaks() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let mgr = LockManager::start(Config::new(server.url())).await.unwrap();
    // Held while the children start, so that every one of their tasks waits when it is
    // released.
    let gate = mgr.lock(NAME).acquire().await.unwrap();
    // One child next to Redis, one a millisecond away each way.
    let far = far_proxy(SocketAddr::from(([127, 0, 0, 1], server.port())), FAR);
    let mut children = vec![
        Child::spawn(&server.url()),
        Child::spawn(&format!("redis://{far}")),
    ];
    for c in &mut children {
        c.ready();
    }
    // Both children are subscribed to the lock's channel: their waiters are parked.
    let channel = format!("redisson_lock__channel:{{{NAME}}}");
    support::wait::until("both children subscribe", || {
        let n: Vec<(String, u64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query(&mut raw)
            .unwrap();
        n[0].1 >= 2
    })
    .await;
    gate.release().await.unwrap();
    let counts: Vec<(u64, u64, u64)> =
        tokio::task::spawn_blocking(move || children.into_iter().map(Child::counts).collect())
            .await
            .unwrap();
    eprintln!("turns: {counts:?}");
    let taken: u64 = raw.get(TAKEN).unwrap();
    assert!(taken >= TOTAL, "{taken}");
    assert_eq!(counts.iter().map(|c| c.0).sum::<u64>(), TOTAL, "{counts:?}");
    for (i, (count, timeouts, overlaps)) in counts.iter().enumerate() {
        assert_eq!(*overlaps, 0, "child {i}: the lock was held twice at once");
        assert_eq!(
            *timeouts, 0,
            "child {i}: {timeouts} waits ran out: {counts:?}"
        );
        assert!(
            *count >= TOTAL / 4,
            "child {i} took {count} of {TOTAL}: {counts:?}"
        );
    }
    mgr.shutdown().await;
}
