//! A Sentinel deployment: a primary, its replicas and three sentinels, and its failovers.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::error::ServerError;
use super::server::{Options, ServerBinary, TestServer, free_port, ping, read_log};
use crate::config::Config;

/// How long the sentinels may take to find each other and the replicas, and a replica to sync.
const DISCOVERY_LIMIT: Duration = Duration::from_secs(30);

/// How long a failover may take before [`SentinelGroup::failover`] gives up: far more than it
/// needs (the down-after time, then a vote and a promotion: a few seconds).
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);

/// A primary, its replicas and three sentinels on 127.0.0.1, each in a folder of its own, all
/// killed when dropped.
///
/// The sentinels watch the primary as [`MASTER`](Self::MASTER) with a quorum of 2 and ask for
/// [`SENTINEL_PASSWORD`](Self::SENTINEL_PASSWORD); the data servers ask for
/// [`DATA_PASSWORD`](Self::DATA_PASSWORD). [`config`](Self::config) gives both, as an
/// application's `Config::sentinel(...)` would.
pub struct SentinelGroup {
    /// The data servers: the first primary first; which one is the primary changes with
    /// failovers.
    servers: Vec<TestServer>,
    sentinels: Vec<Sentinel>,
}

impl std::fmt::Debug for SentinelGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelGroup")
            .field("servers", &self.servers)
            .field("sentinels", &self.sentinel_urls())
            .finish()
    }
}

/// One `redis-server --sentinel` process.
struct Sentinel {
    port: u16,
    /// `None` once killed.
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl SentinelGroup {
    /// The name the sentinels know the primary by.
    pub const MASTER: &'static str = "mymaster";
    /// The data servers' password (the `default` user's).
    pub const DATA_PASSWORD: &'static str = "data-pw";
    /// The sentinels' password.
    pub const SENTINEL_PASSWORD: &'static str = "sentinel-pw";

    /// A primary, one replica and three sentinels that call the primary down after 1 s without
    /// an answer; returns once each sentinel knows the replica and the two other sentinels (so
    /// that a failover can be agreed on).
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(1, Duration::from_millis(1000))
    }

    /// `replicas` replicas (at least one, or no failover can happen), and sentinels that call
    /// the primary down after `down_after` without an answer.
    pub fn start_with(replicas: usize, down_after: Duration) -> Result<Self, ServerError> {
        let binary = ServerBinary::find()?;
        let data = |extra: Vec<String>| {
            Options::default()
                .bin(binary.bin.clone())
                .args(["--masterauth", Self::DATA_PASSWORD])
                .args(extra)
                .password(Self::DATA_PASSWORD)
        };
        let primary = TestServer::start_with(data(Vec::new()))?;
        let primary_port = primary.port();
        let mut servers = vec![primary];
        for _ in 0..replicas {
            servers.push(TestServer::start_with(data(vec![
                "--replicaof".into(),
                "127.0.0.1".into(),
                primary_port.to_string(),
            ]))?);
        }
        let sentinels = (0..3)
            .map(|_| Sentinel::start(&binary, primary_port, down_after))
            .collect::<Result<Vec<_>, _>>()?;
        let group = Self { servers, sentinels };
        for replica in &group.servers[1..] {
            let port = replica.port();
            group.wait_for(&format!("replica {port} to sync"), DISCOVERY_LIMIT, || {
                let mut conn = replica.conn()?;
                let info: String = redis::cmd("INFO").arg("replication").query(&mut conn)?;
                Ok(info.contains("master_link_status:up").then_some(()))
            })?;
        }
        for s in &group.sentinels {
            group.wait_for("the sentinels to find each other", DISCOVERY_LIMIT, || {
                let mut conn = s.conn()?;
                let found: Vec<redis::Value> = redis::cmd("SENTINEL")
                    .arg("REPLICAS")
                    .arg(Self::MASTER)
                    .query(&mut conn)?;
                let others: Vec<redis::Value> = redis::cmd("SENTINEL")
                    .arg("SENTINELS")
                    .arg(Self::MASTER)
                    .query(&mut conn)?;
                Ok((found.len() == replicas && others.len() == 2).then_some(()))
            })?;
        }
        Ok(group)
    }

    /// A [`Config`] as an application would write it: `Config::sentinel(MASTER, <the
    /// sentinels' URLs>)` with the primary's password, and the settings of
    /// [`TestServer::config`] for quick tests (response and connect timeouts of 500 ms, a
    /// watchdog timeout of 3 s, Redis called unavailable after 2 s). No link: the manager
    /// reaches the sentinels and the primary straight.
    pub fn config(&self) -> Config {
        Config::sentinel(Self::MASTER, self.sentinel_urls())
            .master_auth(None, Self::DATA_PASSWORD)
            .response_timeout(Duration::from_millis(500))
            .connect_timeout(Duration::from_millis(500))
            .watchdog_timeout(Duration::from_secs(3))
            .unavailable_after(Duration::from_secs(2))
    }

    /// `redis://:<sentinel password>@127.0.0.1:<port>` of each sentinel, killed ones included.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Sentinel::url).collect()
    }

    /// The data servers, the first primary first (whatever their roles now).
    pub fn servers(&self) -> &[TestServer] {
        &self.servers
    }

    /// The data server on `port`, to stop, pause or look into.
    pub fn server(&mut self, port: u16) -> Option<&mut TestServer> {
        self.servers.iter_mut().find(|s| s.port() == port)
    }

    /// The primary's port, as the first sentinel still running names it.
    pub fn primary_port(&self) -> Result<u16, ServerError> {
        let sentinel = self
            .sentinels
            .iter()
            .find(|s| s.child.is_some())
            .ok_or_else(|| sentinel_error("every sentinel was killed".into()))?;
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(Self::MASTER)
            .query(&mut sentinel.conn()?)?;
        Ok(port)
    }

    /// **A failover, the primary alive** (`SENTINEL FAILOVER`, as an operator's switch-over
    /// would do): a replica is promoted and the old primary made its replica. Returns the new
    /// primary's port once every running sentinel names it and it says it is the primary, and
    /// the old one says it is a replica. What the application sees: its connections to the old
    /// primary refuse writes (`READONLY`) or break; lockman asks the sentinels again, moves
    /// every connection to the new primary, and its waiters retry there. Holds whose key
    /// reached the replica before the switch are renewed there; one whose key did not is
    /// reported lost (`lost()`), as [`TestServer::lose`] shows. Commands in flight may fail with
    /// a retryable error.
    pub fn failover(&mut self) -> Result<u16, ServerError> {
        let old = self.primary_port()?;
        let sentinel = self
            .sentinels
            .iter()
            .find(|s| s.child.is_some())
            .ok_or_else(|| sentinel_error("every sentinel was killed".into()))?;
        let _: () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(Self::MASTER)
            .query(&mut sentinel.conn()?)?;
        let new = self.wait_for_new_primary(old)?;
        self.wait_until_replica(old)?;
        Ok(new)
    }

    /// **The primary killed** (SIGKILL, as a crash): the sentinels call it down after their
    /// down-after time (1 s with [`start`](Self::start)), agree, and promote a replica. Returns
    /// the new primary's port once every running sentinel names it and it says it is the
    /// primary. The old primary stays down ([`server`](Self::server) and
    /// [`TestServer::restart`] bring it back, as an empty replica). What the application
    /// sees: requests to the old primary fail (retryable errors, bounded waits may end in
    /// `Unavailable`) until lockman finds the new primary through the sentinels; then locks are
    /// taken there, waiters retry there, and holds whose key did not reach the replica are
    /// reported lost.
    pub fn kill_primary(&mut self) -> Result<u16, ServerError> {
        let old = self.primary_port()?;
        match self.server(old) {
            Some(server) => server.stop(),
            None => return Err(sentinel_error(format!("no data server on port {old}"))),
        }
        self.wait_for_new_primary(old)
    }

    /// Kills sentinel `i` (0, 1 or 2; SIGKILL). With two of three gone the group has no quorum
    /// left: no failover happens any more.
    pub fn kill_sentinel(&mut self, i: usize) {
        if let Some(s) = self.sentinels.get_mut(i) {
            s.kill();
        }
    }

    /// Waits until every running sentinel names another primary than `old` and that server
    /// says it is the primary; returns its port. [`ServerError::Sentinel`] after 30 s.
    pub fn wait_for_new_primary(&self, old: u16) -> Result<u16, ServerError> {
        self.wait_for("a new primary", FAILOVER_LIMIT, || {
            let mut named = None;
            for s in self.sentinels.iter().filter(|s| s.child.is_some()) {
                let (_, port): (String, u16) = redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(Self::MASTER)
                    .query(&mut s.conn()?)?;
                if port == old || named.is_some_and(|n| n != port) {
                    return Ok(None);
                }
                named = Some(port);
            }
            match named {
                Some(port) if self.role(port)? == "master" => Ok(Some(port)),
                _ => Ok(None),
            }
        })
    }

    /// Waits until the server on `port` says it is a replica (a demoted primary refuses writes
    /// from then on). [`ServerError::Sentinel`] after 30 s.
    pub fn wait_until_replica(&self, port: u16) -> Result<(), ServerError> {
        self.wait_for(&format!("{port} to be a replica"), FAILOVER_LIMIT, || {
            Ok((self.role(port)? == "slave").then_some(()))
        })
    }

    /// What the server on `port` answers to `ROLE`: `master` or `slave`.
    fn role(&self, port: u16) -> Result<String, ServerError> {
        let server = self
            .servers
            .iter()
            .find(|s| s.port() == port)
            .ok_or_else(|| sentinel_error(format!("no data server on port {port}")))?;
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut server.conn()?)?;
        Ok(match role.first() {
            Some(redis::Value::BulkString(r)) => String::from_utf8_lossy(r).into_owned(),
            _ => String::new(),
        })
    }

    /// Polls `check` every 50 ms until it gives a value; an error from it counts as "not yet"
    /// (a server restarting, a sentinel busy), and is told with the sentinels' logs at `limit`.
    fn wait_for<T>(
        &self,
        what: &str,
        limit: Duration,
        mut check: impl FnMut() -> Result<Option<T>, ServerError>,
    ) -> Result<T, ServerError> {
        let deadline = Instant::now() + limit;
        loop {
            let last = match check() {
                Ok(Some(value)) => return Ok(value),
                Ok(None) => String::from("not yet"),
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(sentinel_error(format!(
                    "no {what} within {limit:?} (last: {last}); sentinel logs: {}",
                    self.logs()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn logs(&self) -> String {
        self.sentinels
            .iter()
            .map(|s| read_log(&s.dir.path().join("sentinel.log")))
            .collect::<Vec<_>>()
            .join(" || ")
    }
}

impl Sentinel {
    fn start(
        binary: &ServerBinary,
        primary: u16,
        down_after: Duration,
    ) -> Result<Self, ServerError> {
        let dir = super::spawner::temp_dir()?;
        let port = free_port()?;
        let conf = dir.path().join("sentinel.conf");
        let master = SentinelGroup::MASTER;
        let text = format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {dir}\nlogfile {dir}/sentinel.log\n\
             sentinel monitor {master} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {master} {down}\n\
             sentinel failover-timeout {master} 4000\n\
             sentinel parallel-syncs {master} 1\n\
             sentinel auth-pass {master} {data}\n\
             requirepass {pass}\n\
             sentinel sentinel-pass {pass}\n",
            dir = dir.path().display(),
            down = down_after.as_millis(),
            data = SentinelGroup::DATA_PASSWORD,
            pass = SentinelGroup::SENTINEL_PASSWORD,
        );
        std::fs::write(&conf, text)?;
        let mut command = super::spawner::server_command(binary.bin.as_os_str());
        command
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = super::spawner::spawn(command).map_err(|source| ServerError::Missing {
            bin: binary.bin.clone(),
            source,
        })?;
        let mut sentinel = Self {
            port,
            child: Some(child),
            dir,
        };
        let client = redis::Client::open(sentinel.url())?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ping(&client, Duration::from_millis(200)) {
            if Instant::now() >= deadline {
                let log = read_log(&sentinel.dir.path().join("sentinel.log"));
                sentinel.kill();
                return Err(ServerError::NotStarted {
                    server: format!("{} --sentinel", binary.version),
                    port,
                    reason: format!("no PING answer within 10 s: {log}"),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(sentinel)
    }

    fn url(&self) -> String {
        format!(
            "redis://:{}@127.0.0.1:{}",
            SentinelGroup::SENTINEL_PASSWORD,
            self.port
        )
    }

    /// A blocking connection whose commands fail after 5 s without an answer.
    fn conn(&self) -> Result<redis::Connection, ServerError> {
        let limit = Duration::from_secs(5);
        let conn = redis::Client::open(self.url())?.get_connection_with_timeout(limit)?;
        conn.set_read_timeout(Some(limit))?;
        Ok(conn)
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.kill();
    }
}

fn sentinel_error(what: String) -> ServerError {
    ServerError::Sentinel(what)
}
