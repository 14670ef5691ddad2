//! What lockman's own suite adds to `lockman::testing`, the kit every server, Sentinel group,
//! cluster and proxy of the suite comes from.
//!
//! Here: [`RedisServer`] is the kit's `TestServer` (through `Deref`) with conveniences that
//! panic (failing the test) instead of returning errors, and [`Options`] make other kinds of
//! server: TLS-only with certificates made at test time ([`certs`]), with a unix socket, with ACL
//! users or any other setting, with an environment of its own. [`raw`] and [`async_conn`]
//! connect to any of the kit's servers.
//!
//! Every server of a test process (plain, Sentinel, cluster node) runs one binary
//! (`REDIS_SERVER_BIN`, default `redis-server` on the PATH); the first start says on stderr
//! which server and version it is (`Redis server v=7.0.15`, `Valkey server v=9.1.2`), and from
//! then on every panic in the process ends with that name, so a failing test says what it ran on
//! (CI runs the suite on Redis and on Valkey).
//!
//! The rest, a module per job: [`sentinel`] and [`cluster`] wrap the kit's groups with what only
//! this suite does to them (a slot moved by hand, say); [`proxy`], the kit's link; [`wait`],
//! waits for a state instead of sleeps; [`commands`], what Redis counts and hears; [`logs`] and
//! [`recorder`], what lockman logs and records; [`locks`], shared workloads and checks;
//! [`party`], the deadlock tests' parties; [`fair`], a fair lock's queue and skewed clocks;
//! [`child`], a test's own binary as a second process; [`redisson`], the Java side;
//! [`example`], the Redis an example talks to.
//!
//! Test binaries use a part of it each: `dead_code` is allowed here for what one binary does
//! not call.
#![allow(dead_code)]

pub mod certs;
pub mod child;
pub mod cluster;
pub mod commands;
pub mod example;
pub mod fair;
pub mod locks;
pub mod logs;
pub mod party;
pub mod proxy;
#[cfg(feature = "metrics")]
pub mod recorder;
pub mod redisson;
pub mod sentinel;
pub mod wait;

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

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
    let vars: Vec<String> = env
        .iter()
        .map(|(k, v)| quote(&format!("{k}={v}")))
        .collect();
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
    let linked = wait::eventually_blocking(Duration::from_secs(10), || {
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

/// A free loopback port below 55536 whose port + 10000 is free too (a cluster node's bus listens
/// there), never handed out before in this process (the kit's ports, `lockman::testing`'s).
pub fn free_port() -> u16 {
    lockman::testing::free_port().expect("a free port pair")
}

/// A loopback port nothing listens on, and that no server of this process will ever take.
pub fn closed_port() -> u16 {
    free_port()
}
