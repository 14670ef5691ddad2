//! A Sentinel deployment for tests: a primary, one replica of it (or more), and three sentinels
//! (`redis-server <conf> --sentinel`) watching it as `mymaster` with a quorum of 2, all on
//! loopback, each in a temp folder of its own, all killed when dropped. The data servers ask
//! for [`DATA_PASSWORD`], the sentinels for [`SENTINEL_PASSWORD`]: clients must give both.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Options, RedisServer, free_port, read_log};

/// The name the sentinels know the primary by.
pub const MASTER: &str = "mymaster";
/// The password of the primary and the replica (`default` user).
pub const DATA_PASSWORD: &str = "data-pw";
/// The password of the sentinels.
pub const SENTINEL_PASSWORD: &str = "sentinel-pw";

/// How long sentinels may take to find each other and the replica.
const DISCOVERY_LIMIT: Duration = Duration::from_secs(30);

/// A primary, its replicas and three sentinels.
pub struct SentinelGroup {
    /// The data servers; which one is the primary changes with failovers.
    pub servers: Vec<RedisServer>,
    sentinels: Vec<SentinelProcess>,
}

struct SentinelProcess {
    port: u16,
    child: Child,
    dir: tempfile::TempDir,
}

impl SentinelGroup {
    /// Starts everything and waits until each sentinel knows the replica and the two other
    /// sentinels (so that a failover can be agreed on).
    pub fn start() -> Self {
        Self::start_with(1, Duration::from_millis(1000))
    }

    /// `replicas` replicas, and sentinels that call the primary down after `down_after` without
    /// an answer.
    pub fn start_with(replicas: usize, down_after: Duration) -> Self {
        let data = |args: Vec<String>| Options {
            args: [vec!["--masterauth".into(), DATA_PASSWORD.into()], args].concat(),
            password: Some(DATA_PASSWORD.into()),
            ..Options::default()
        };
        let primary = RedisServer::start_with(data(Vec::new()));
        let mut servers = vec![primary];
        for _ in 0..replicas {
            servers.push(RedisServer::start_with(data(vec![
                "--replicaof".into(),
                "127.0.0.1".into(),
                servers[0].port().to_string(),
            ])));
        }
        let sentinels = (0..3)
            .map(|_| SentinelProcess::start(servers[0].port(), down_after))
            .collect();
        let group = Self { servers, sentinels };
        for server in &group.servers[1..] {
            let mut replica = server.conn();
            let synced = super::eventually_blocking(DISCOVERY_LIMIT, || {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut replica)
                    .unwrap_or_default();
                info.contains("master_link_status:up")
            });
            assert!(synced, "a replica never synced");
        }
        group.wait_until_discovered(replicas);
        group
    }

    /// Kills the sentinel `i` (SIGKILL): two of three gone, the group has no quorum left.
    pub fn kill_sentinel(&mut self, i: usize) {
        let _ = self.sentinels[i].child.kill();
        let _ = self.sentinels[i].child.wait();
    }

    /// `redis://:<sentinel password>@127.0.0.1:<port>` of each sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(|s| s.url()).collect()
    }

    /// A blocking connection to the first sentinel.
    pub fn sentinel_conn(&self) -> redis::Connection {
        self.sentinels[0].conn()
    }

    /// A blocking connection to the data server on `port`.
    pub fn data_conn(port: u16) -> Option<redis::Connection> {
        redis::Client::open(format!("redis://:{DATA_PASSWORD}@127.0.0.1:{port}"))
            .and_then(|c| c.get_connection())
            .ok()
    }

    /// The port of the primary as the sentinels see it.
    pub fn primary_port(&self) -> u16 {
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER)
            .query(&mut self.sentinel_conn())
            .expect("SENTINEL GET-MASTER-ADDR-BY-NAME");
        port
    }

    /// The data server on `port`.
    pub fn server(&mut self, port: u16) -> &mut RedisServer {
        self.servers
            .iter_mut()
            .find(|s| s.port() == port)
            .expect("a server of the group")
    }

    /// The data server that is not on `port`.
    pub fn other(&mut self, port: u16) -> &mut RedisServer {
        self.servers
            .iter_mut()
            .find(|s| s.port() != port)
            .expect("a server of the group")
    }

    /// Waits until the sentinels name another primary than `old` and that server says it is
    /// the primary; returns its port. Panics after `limit`.
    pub fn wait_for_new_primary(&self, old: u16, limit: Duration) -> u16 {
        let deadline = Instant::now() + limit;
        loop {
            let now = self.primary_port();
            if now != old {
                let role: Vec<redis::Value> = Self::data_conn(now)
                    .and_then(|mut c| redis::cmd("ROLE").query(&mut c).ok())
                    .unwrap_or_default();
                if matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master") {
                    return now;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no failover within {limit:?}: {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the server on `port` says it is a replica (a demoted primary refuses
    /// writes from then on). Panics after `limit`.
    pub fn wait_until_replica(&self, port: u16, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let role: Vec<redis::Value> = Self::data_conn(port)
                .and_then(|mut c| redis::cmd("ROLE").query(&mut c).ok())
                .unwrap_or_default();
            if matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"slave") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{port} was not demoted within {limit:?}: {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_until_discovered(&self, replicas: usize) {
        let deadline = Instant::now() + DISCOVERY_LIMIT;
        for s in &self.sentinels {
            let mut conn = s.conn();
            loop {
                let found: Vec<redis::Value> = redis::cmd("SENTINEL")
                    .arg("REPLICAS")
                    .arg(MASTER)
                    .query(&mut conn)
                    .unwrap_or_default();
                let sentinels: Vec<redis::Value> = redis::cmd("SENTINEL")
                    .arg("SENTINELS")
                    .arg(MASTER)
                    .query(&mut conn)
                    .unwrap_or_default();
                if found.len() == replicas && sentinels.len() == 2 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "sentinels did not find each other within {DISCOVERY_LIMIT:?}: {}",
                    self.logs()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
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

impl SentinelProcess {
    fn start(primary: u16, down_after: Duration) -> Self {
        let bin = &super::server().bin;
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let conf = dir.path().join("sentinel.conf");
        let text = format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {dir}\nlogfile {dir}/sentinel.log\n\
             sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {MASTER} {down}\n\
             sentinel failover-timeout {MASTER} 4000\n\
             sentinel parallel-syncs {MASTER} 1\n\
             sentinel auth-pass {MASTER} {DATA_PASSWORD}\n\
             requirepass {SENTINEL_PASSWORD}\n\
             sentinel sentinel-pass {SENTINEL_PASSWORD}\n",
            dir = dir.path().display(),
            down = down_after.as_millis()
        );
        std::fs::write(&conf, text).expect("write sentinel.conf");
        let child = Command::new(bin)
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {bin:?} --sentinel: {e}"));
        let process = Self { port, child, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        let client = redis::Client::open(process.url()).expect("url");
        while !super::ping(&client, Duration::from_millis(200)) {
            assert!(
                Instant::now() < deadline,
                "sentinel did not start: {}",
                read_log(&process.dir.path().join("sentinel.log"))
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        process
    }
}

impl SentinelProcess {
    fn url(&self) -> String {
        format!("redis://:{SENTINEL_PASSWORD}@127.0.0.1:{}", self.port)
    }

    fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .expect("connect to a sentinel")
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
