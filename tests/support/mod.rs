//! What lockman's own suite adds to `lockman::testing`, the kit every server, Sentinel group,
//! cluster and proxy of the suite comes from.
//!
//! [`RedisServer`] is the kit's `TestServer` (through `Deref`) with conveniences that panic
//! (failing the test) instead of returning errors; [`sentinel`] and [`cluster`] wrap the kit's
//! `SentinelGroup` and `Cluster` the same way, with what only this suite does to them (a slot
//! moved by hand, say). [`raw`] and [`async_conn`] connect to any of the kit's servers.
//!
//! Every server of a test process (plain, Sentinel, cluster node) runs one binary
//! (`REDIS_SERVER_BIN`, default `redis-server` on the PATH); the first start says on stderr
//! which server and version it is (`Redis server v=7.0.15`, `Valkey server v=9.1.2`), and from
//! then on every panic in the process ends with that name, so a failing test says what it ran on
//! (CI runs the suite on Redis and on Valkey).
//!
//! [`Options`] make other kinds of server: TLS-only with certificates made at test time
//! ([`certs`]), with a unix socket, with ACL users or any other setting. The rest is the suite's
//! own: the Java side of the synchronizers ([`redisson`]), recorders, waits for a state
//! ([`wait`]), child-test spawning.
#![allow(dead_code)]

pub mod certs;
pub mod cluster;
pub mod fair;
pub mod party;
pub mod proxy;
#[cfg(feature = "metrics")]
pub mod recorder;
pub mod redisson;
pub mod sentinel;
pub mod wait;

use std::ops::{Deref, DerefMut};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockman::testing::TestServer;

/// What kind of server [`RedisServer::start_with`] starts (the suite's shape of
/// `lockman::testing::Options`, with certificates made at test time).
#[derive(Clone, Default)]
pub struct Options {
    /// TLS only (`--port 0`, `--tls-port`), with these certificates.
    pub tls: Option<Arc<certs::TestCerts>>,
    /// With TLS: require a client certificate.
    pub tls_auth_clients: bool,
    /// Also listen on a unix socket in the server's folder.
    pub unix_socket: bool,
    /// More arguments, e.g. `--user app on >pw ~* &* +@all`.
    pub args: Vec<String>,
    /// The `default` user's password (`--requirepass`), used by [`RedisServer::client`].
    pub password: Option<String>,
    /// Environment variables of the server's process alone, at every start and restart (the
    /// chaos runner's libfaketime clock for the lock server). Set on the runner's own
    /// environment instead, they would reach every process it starts meanwhile.
    pub env: Vec<(String, String)>,
}

impl Options {
    /// The kit's options for the same server.
    fn kit(&self) -> lockman::testing::Options {
        let mut kit = lockman::testing::Options::default().args(self.args.iter().cloned());
        if let Some(pw) = &self.password {
            kit = kit.password(pw.clone());
        }
        if self.unix_socket {
            kit = kit.unix_socket();
        }
        if let Some(certs) = &self.tls {
            kit = kit.tls(certs.tls_files(self.tls_auth_clients));
        }
        kit
    }
}

/// One throwaway server: `lockman::testing::TestServer` (its methods, through `Deref`), with
/// the suite's conveniences that panic (failing the test) instead of returning errors.
pub struct RedisServer(TestServer, Option<tempfile::TempDir>);

impl Deref for RedisServer {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.0
    }
}

impl DerefMut for RedisServer {
    fn deref_mut(&mut self) -> &mut TestServer {
        &mut self.0
    }
}

/// A script that runs the suite's server binary with `env` added to its environment (`exec`:
/// the server keeps the script's pid, which the kit kills and waits for), in a folder that
/// lives as long as the server. The kit has no environment option: its server is this script.
/// Written once, before the server's first start; restarts run it as it is.
#[cfg(unix)]
fn with_env(env: &[(String, String)]) -> std::io::Result<(tempfile::TempDir, std::path::PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let vars: Vec<String> = env.iter().map(|(k, v)| quote(&format!("{k}={v}"))).collect();
    let bin = quote(&server().bin.to_string_lossy());
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("server");
    let text = format!("#!/bin/sh\nexec env {} {bin} \"$@\"\n", vars.join(" "));
    std::fs::write(&script, text)?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    Ok((dir, script))
}

impl RedisServer {
    /// Starts a server on a free port; panics (failing the test) when none can be started.
    pub fn start() -> Self {
        Self::start_with(Options::default())
    }

    /// Starts a server of the given kind on a free port.
    pub fn start_with(options: Options) -> Self {
        let binary = server();
        let mut kit = options.kit();
        let mut wrapper = None;
        if !options.env.is_empty() {
            #[cfg(unix)]
            {
                let (dir, script) = with_env(&options.env).expect("the server's env script");
                kit = kit.bin(script);
                wrapper = Some(dir);
            }
            #[cfg(not(unix))]
            panic!("a server with its own environment needs a unix shell");
        }
        match TestServer::start_with(kit) {
            Ok(server) => Self(server, wrapper),
            Err(e) => panic!("could not start {}: {e}", binary.version),
        }
    }

    /// The port (also through `Deref`; here for `.map(RedisServer::port)`).
    pub fn port(&self) -> u16 {
        self.0.port()
    }

    /// The URL straight to the server (also through `Deref`; here for `.map(RedisServer::url)`).
    pub fn url(&self) -> String {
        self.0.url()
    }

    /// A redis-rs client for checking the server's state directly (as the `default` user; for
    /// TLS, trusting the test CA and presenting the client certificate).
    pub fn client(&self) -> redis::Client {
        self.0.client().expect("a client of the test server")
    }

    /// A blocking connection, for raw checks (HGETALL, PTTL, INFO …), with no read time-out.
    pub fn conn(&self) -> redis::Connection {
        raw(self)
    }

    /// A multiplexed async connection, for raw checks from async tests.
    pub async fn async_conn(&self) -> redis::aio::MultiplexedConnection {
        async_conn(self).await
    }

    /// Starts the server again on the same port, with what it persisted; panics when it
    /// cannot.
    pub fn restart(&mut self) {
        let port = self.port();
        if let Err(e) = self.0.restart() {
            panic!("could not restart {} on {port}: {e}", server().version);
        }
    }

    /// Stalls the server for `seconds`: it answers no client meanwhile, then runs what queued
    /// up. `CLIENT PAUSE … ALL` replies once the pause is in effect, so the stall has begun
    /// when this returns (a `DEBUG SLEEP` sent from a thread gives no such sign). The handle
    /// ends when the server answers again.
    pub fn stall(&self, seconds: f64) -> std::thread::JoinHandle<()> {
        let mut conn = self.conn();
        let millis = (seconds * 1000.0).round() as u64;
        redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(millis)
            .arg("ALL")
            .query::<()>(&mut conn)
            .expect("CLIENT PAUSE");
        // This connection is paused too: its PING is answered when the stall ends.
        std::thread::spawn(move || {
            redis::cmd("PING")
                .query::<()>(&mut conn)
                .expect("PING after the stall")
        })
    }
}

/// How long a test's `pause` lasts at most: the test ends it itself with `resume()`; the limit
/// only bounds a pause that a failing test left behind.
pub const FROZEN: Duration = Duration::from_secs(60);

/// A plain server with more arguments (`--maxmemory-policy`, `allkeys-lru`, …).
pub fn server_with(args: &[&str]) -> RedisServer {
    RedisServer::start_with(Options {
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        ..Options::default()
    })
}

/// A primary and its replica, once the replica is online (the primary counts it connected).
pub fn primary_and_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start();
    let replica = server_with(&["--replicaof", "127.0.0.1", &primary.port().to_string()]);
    let mut raw = primary.conn();
    let linked = eventually_blocking(Duration::from_secs(10), || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut raw)
            .unwrap_or_default();
        info.contains("connected_slaves:1") && info.contains("state=online")
    });
    assert!(linked, "the replica never came online");
    (primary, replica)
}

/// A blocking connection to any of the kit's servers (a node of a cluster, a server of a
/// Sentinel group), for raw checks, with no read time-out; panics when it cannot connect.
pub fn raw(server: &TestServer) -> redis::Connection {
    server
        .client()
        .and_then(|c| Ok(c.get_connection()?))
        .expect("connect to a test server")
}

/// A multiplexed async connection to any of the kit's servers, for raw checks from async tests.
pub async fn async_conn(server: &TestServer) -> redis::aio::MultiplexedConnection {
    let client = server.client().expect("a client of the test server");
    client
        .get_multiplexed_async_connection()
        .await
        .expect("connect to a test server")
}

/// The server binary every test server of this process runs, and what it says it is.
pub struct ServerBinary {
    /// `REDIS_SERVER_BIN`, else `redis-server` (found on the PATH).
    pub bin: std::ffi::OsString,
    /// The start of its `--version` line, `Redis server v=7.0.15` or `Valkey server v=9.1.2`;
    /// the path when it does not answer `--version` (starting it then fails and says why).
    pub version: String,
}

/// The server binary of this test process, read once. The first call says on stderr which it is,
/// and chains a panic hook that names it after every panic message: a test that fails on one
/// server of CI's matrix and not on another says which (a test's captured output holds the hook's
/// line right after its panic message).
pub fn server() -> &'static ServerBinary {
    static SERVER: std::sync::OnceLock<ServerBinary> = std::sync::OnceLock::new();
    SERVER.get_or_init(|| {
        let bin = std::env::var_os("REDIS_SERVER_BIN").unwrap_or_else(|| "redis-server".into());
        let version = lockman::testing::ServerBinary::find()
            .map(|found| found.version)
            .unwrap_or_else(|_| bin.to_string_lossy().into_owned());
        let path = bin.to_string_lossy();
        let named = match version == path {
            true => version.clone(),
            false => format!("{version}, {path}"),
        };
        // Written to the process's stderr, not through `eprintln!`, which a test's output capture
        // would keep (and show only if that one test failed).
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "test servers: {named}");
        let previous = std::panic::take_hook();
        // Before the panic message, not after: with RUST_BACKTRACE set the message is followed
        // by a long backtrace that would bury the line.
        std::panic::set_hook(Box::new(move |info| {
            eprintln!("(test servers: {named})");
            previous(info);
        }));
        ServerBinary { bin, version }
    })
}

/// Whether a server answers PING within `limit`.
fn ping(client: &redis::Client, limit: Duration) -> bool {
    client
        .get_connection_with_timeout(limit)
        .is_ok_and(|mut conn| redis::cmd("PING").query::<String>(&mut conn).is_ok())
}

/// A free loopback port below 55536 whose port + 10000 is free too (a cluster node's bus listens
/// there), never handed out before in this process (the kit's ports, `lockman::testing`'s).
pub fn free_port() -> u16 {
    lockman::testing::free_port().expect("a free port pair")
}

/// A loopback port nothing listens on, and that no server of this process will ever take.
pub fn closed_port() -> u16 {
    free_port()
}

/// Number of calls of `command` (lowercase, e.g. `evalsha`, `publish`) since the last
/// CONFIG RESETSTAT, from INFO commandstats.
pub fn command_calls(conn: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// CONFIG RESETSTAT: command counts start again from zero.
pub fn reset_stats(conn: &mut redis::Connection) {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(conn)
        .expect("CONFIG RESETSTAT");
}

/// Takes and releases `lock` once, so that its kind's acquire and release scripts are loaded: on
/// a fresh server each first EVALSHA is a NOSCRIPT miss, which would skew counts and stalls.
pub async fn load_scripts(lock: &lockman::Lock) {
    lock.try_acquire()
        .await
        .expect("warm-up acquire")
        .expect("warm-up lock is free")
        .release()
        .await
        .expect("warm-up release");
}

/// Whether every lock actor of `manager` stops within `limit` (checked every 10 ms).
pub async fn lock_actors_stop(manager: &lockman::LockManager, limit: Duration) -> bool {
    // An idle lock actor lingers between one and two `idle_linger`s before it stops; the
    // managers of these tests keep the default.
    let deadline = Instant::now() + limit + 2 * lockman::DEFAULT_IDLE_LINGER;
    while manager.live_lock_actors().await > 0 {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// Each round: lock → read the counter `key` → yield → write counter + 1 → unlock. Without
/// exclusion, rounds overwrite each other and the total comes out short.
pub async fn count_rounds(
    lock: lockman::Lock,
    mut conn: redis::aio::MultiplexedConnection,
    key: &str,
    rounds: u32,
) {
    use redis::AsyncCommands;
    for _ in 0..rounds {
        let guard = lock.acquire().await.expect("acquire");
        let n: u64 = conn
            .get::<_, Option<u64>>(key)
            .await
            .expect("GET")
            .unwrap_or(0);
        tokio::task::yield_now().await;
        let _: () = conn.set(key, n + 1).await.expect("SET");
        guard.release().await.expect("release");
    }
}

/// The guard a spawned `acquire` got, waiting for it at most `limit`: panics (failing the test)
/// when the waiter was not woken in time or failed.
pub async fn woken(
    waiting: tokio::task::JoinHandle<Result<lockman::LockGuard, lockman::LockError>>,
    limit: Duration,
) -> lockman::LockGuard {
    tokio::time::timeout(limit, waiting)
        .await
        .expect("the waiter was woken in time")
        .expect("the waiter did not panic")
        .expect("the waiter acquired")
}

/// A raw subscriber, standing in for another client: `command` (`SUBSCRIBE`, `SSUBSCRIBE`)
/// on `channel` over a blocking connection that gives up reading after 3 s.
pub fn listen(mut conn: redis::Connection, command: &str, channel: &str) -> redis::Connection {
    conn.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("read timeout");
    redis::cmd(command)
        .arg(channel)
        .exec(&mut conn)
        .expect("subscribe");
    conn
}

/// The next message a [`listen`] connection hears: `[kind, channel, payload]`.
pub fn next_message(conn: &mut redis::Connection) -> Vec<String> {
    let heard = conn.recv_response().expect("a message within 3 s");
    redis::from_redis_value(heard).expect("a pub/sub message")
}

/// Polls `check` every 10 ms until it holds or `limit` passes; returns whether it held.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits up to `limit` until `channel` has a subscriber (`PUBSUB NUMSUB`): a waiter that
/// subscribed is waiting. Returns whether it had one.
pub async fn subscribed(conn: &mut redis::Connection, channel: &str, limit: Duration) -> bool {
    eventually(limit, || {
        redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query::<(String, u64)>(conn)
            .is_ok_and(|(_, n)| n > 0)
    })
    .await
}

/// [`eventually`] for code that is not async: polls `check` every 20 ms up to `limit`.
pub fn eventually_blocking(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Ok when the redis-server binary runs; else its name.
fn redis_server_installed() -> Result<(), std::ffi::OsString> {
    let bin = std::env::var_os("REDIS_SERVER_BIN").unwrap_or_else(|| "redis-server".into());
    // Not `server()`: an example says how to install a missing server, without a panic hook.
    let runs = Command::new(&bin)
        .arg("--version")
        .stdout(Stdio::null())
        .status();
    if runs.is_ok_and(|s| s.success()) {
        Ok(())
    } else {
        Err(bin)
    }
}

/// The value of `found`, or its message on stderr and exit code 1: for examples' `main`.
pub fn or_exit<T>(found: Result<T, String>) -> T {
    found.unwrap_or_else(|how| {
        eprintln!("{how}");
        std::process::exit(1)
    })
}

/// The Redis an example talks to: `REDIS_URL` when set; else the one answering on
/// 127.0.0.1:6379; else a private redis-server started for this run (said on stderr). `Err` says
/// how to get a redis-server when none is installed.
pub fn redis_for_example() -> Result<(String, Option<RedisServer>), String> {
    if let Some(url) = std::env::var("REDIS_URL").ok().filter(|u| !u.is_empty()) {
        return Ok((url, None));
    }
    let local = "redis://127.0.0.1:6379/0";
    if redis::Client::open(local).is_ok_and(|c| ping(&c, Duration::from_millis(300))) {
        eprintln!("using the Redis on 127.0.0.1:6379 (set REDIS_URL to use another)");
        return Ok((local.to_owned(), None));
    }
    redis_server_installed().map_err(|bin| {
        format!(
            "no Redis: REDIS_URL is unset, nothing answers on 127.0.0.1:6379, and {bin:?} is not \
             installed.\nInstall one (Debian/Ubuntu: apt-get install redis-server; macOS: brew \
             install redis), or set REDIS_URL=redis://host:port/db"
        )
    })?;
    let server = RedisServer::start();
    eprintln!(
        "started a private redis-server on {} for this run (stopped at exit)",
        server.url()
    );
    Ok((server.url(), Some(server)))
}

/// `n` Redis servers for an example: the comma-separated `REDIS_URLS` when set (at least `n`
/// of them), else `n` private redis-servers started for this run (said on stderr).
pub fn servers_for_example(n: usize) -> Result<(Vec<String>, Vec<RedisServer>), String> {
    if let Some(urls) = std::env::var("REDIS_URLS").ok().filter(|u| !u.is_empty()) {
        let urls: Vec<String> = urls.split(',').map(|u| u.trim().to_owned()).collect();
        if urls.len() < n {
            return Err(format!(
                "REDIS_URLS names {} servers; this example needs {n}",
                urls.len()
            ));
        }
        return Ok((urls, Vec::new()));
    }
    redis_server_installed().map_err(|bin| {
        format!(
            "REDIS_URLS is unset and {bin:?} is not installed: install one (Debian/Ubuntu: \
             apt-get install redis-server) or set REDIS_URLS=redis://a:6379,redis://b:6379,…"
        )
    })?;
    let servers: Vec<RedisServer> = (0..n).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    eprintln!(
        "started {n} private redis-servers for this run: {}",
        urls.join(", ")
    );
    Ok((urls, servers))
}

/// Runs this test binary's ignored test `test` as a child process, with `env` set, and waits
/// until it prints a line starting with `prefix`: returns the child (kill it) and the rest of
/// that line.
pub fn spawn_child_test(
    test: &str,
    env: (&str, &str),
    prefix: &str,
) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe)
        .args(["--ignored", "--exact", test, "--nocapture"])
        .env(env.0, env.1)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child test");
    let stdout = child.stdout.take().expect("piped stdout");
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("child output");
        if let Some(rest) = line.strip_prefix(prefix) {
            return (child, rest.trim().to_owned());
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("child test {test} ended without printing {prefix:?}");
}

/// Checks a replica-synced acquire that no replica acknowledged: `ReplicaSync { acked: 0,
/// wanted: 1 }`, within two seconds of `started` (the sync timeout, not the response timeout).
pub fn assert_unacknowledged(err: &lockman::LockError, started: Instant) {
    assert!(
        matches!(
            err,
            lockman::LockError::ReplicaSync {
                acked: 0,
                wanted: 1
            }
        ),
        "{err:?}"
    );
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "{took:?}");
}

/// Every exclusive lock kind on `name`, labelled: reentrant, fenced, fair, the write side of a
/// read-write lock, non-reentrant, non-reentrant fair and spin (the suites that run one promise
/// through each kind).
pub fn exclusive_kinds(
    mgr: &lockman::LockManager,
    name: &str,
) -> Vec<(&'static str, lockman::Lock)> {
    vec![
        ("reentrant", mgr.lock(name)),
        ("fenced", mgr.fenced_lock(name).into()),
        ("fair", mgr.fair_lock(name).into()),
        ("write", mgr.read_write_lock(name).write().into()),
        ("non-reentrant", mgr.non_reentrant_lock(name)),
        (
            "non-reentrant fair",
            mgr.non_reentrant_fair_lock(name).into(),
        ),
        ("spin", mgr.spin_lock(name)),
    ]
}
