//! A local Redis Cluster for tests: redis-servers started with `--cluster-enabled yes` on
//! loopback ports below 55536 (the bus listens on port + 10000), joined by
//! `redis-cli --cluster create`, ready once every node reports `cluster_state:ok`; every node
//! is killed when dropped.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Options, RedisServer};

const READY_LIMIT: Duration = Duration::from_secs(30);

/// The nodes of one cluster.
pub struct Cluster {
    pub nodes: Vec<RedisServer>,
}

impl Cluster {
    /// `masters` masters with `replicas` replicas each, every slot assigned.
    pub fn start(masters: usize, replicas: usize) -> Self {
        Self::start_with(masters, replicas, &[])
    }

    /// As [`start`](Self::start), each node with more arguments (ACL users, say).
    pub fn start_with(masters: usize, replicas: usize, args: &[String]) -> Self {
        Self::start_nodes(masters, replicas, args, None)
    }

    /// A cluster that speaks only TLS, to clients and on its bus, with certificates of `certs`.
    /// Nodes announce themselves as `localhost` (the name the test certificate is for), so that
    /// clients that follow the cluster's topology can check the certificates. On the bus a node
    /// is also a TLS client, and Redis always asks for a client certificate there: each presents
    /// the test client certificate.
    pub fn start_tls(masters: usize, certs: std::sync::Arc<super::certs::TestCerts>) -> Self {
        let file = |name: &str| certs.file(name).display().to_string();
        let args = [
            "--tls-client-cert-file".to_owned(),
            file("client.pem"),
            "--tls-client-key-file".to_owned(),
            file("client.key"),
        ];
        let args = args.into_iter().chain(
            [
                "--tls-cluster",
                "yes",
                "--tls-replication",
                "yes",
                "--cluster-announce-hostname",
                "localhost",
                "--cluster-preferred-endpoint-type",
                "hostname",
            ]
            .map(String::from),
        );
        Self::start_nodes(masters, 0, &args.collect::<Vec<_>>(), Some(certs))
    }

    fn start_nodes(
        masters: usize,
        replicas: usize,
        args: &[String],
        tls: Option<std::sync::Arc<super::certs::TestCerts>>,
    ) -> Self {
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| {
                let cluster = ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"];
                RedisServer::start_with(Options {
                    args: cluster
                        .iter()
                        .map(|a| (*a).to_owned())
                        .chain(args.iter().cloned())
                        .collect(),
                    tls: tls.clone(),
                    ..Options::default()
                })
            })
            .collect();
        let tls_args: Vec<String> = match &tls {
            Some(certs) => vec![
                "--tls".into(),
                "--cacert".into(),
                certs.file("ca.pem").display().to_string(),
            ],
            None => Vec::new(),
        };
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let cli = std::env::var_os("REDIS_CLI_BIN").unwrap_or_else(|| "redis-cli".into());
        let out = Command::new(&cli)
            .args(&tls_args)
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cli:?} ({e}): install redis-tools"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = Self { nodes };
        cluster.wait_until_ok();
        cluster
    }

    /// The URL of every node (seeds for a cluster client): `redis://127.0.0.1:<port>`, or
    /// `rediss://localhost:<port>` for a TLS cluster.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| n.url().strip_suffix("/0").unwrap_or_default().to_owned())
            .collect()
    }

    /// The port of the master that serves `key` now (as the first node sees it).
    pub fn owner_of(&self, key: &str) -> u16 {
        let first = self.nodes[0].port();
        self.owner_asking(key, first)
            .expect("every slot has a master")
    }

    /// The node listening on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .expect("a node of this cluster")
    }

    /// Keys on every node together (DBSIZE summed over the masters and replicas).
    pub fn total_keys(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| {
                redis::cmd("DBSIZE")
                    .query::<u64>(&mut n.conn())
                    .unwrap_or(0)
            })
            .sum()
    }

    /// The keys of every node but the client records (`lockman_client:{lockman}…`), which a
    /// manager writes at its first use of a name, whatever the name's fate.
    pub fn lock_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .nodes
            .iter()
            .flat_map(|n| {
                redis::cmd("KEYS")
                    .arg("*")
                    .query::<Vec<String>>(&mut n.conn())
                    .unwrap_or_default()
            })
            .filter(|k| !k.starts_with("lockman_client:{lockman}"))
            .collect();
        keys.sort();
        keys
    }

    /// The node id of the node on `port`.
    pub fn node_id(&self, port: u16) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.node(port).conn())
            .expect("CLUSTER MYID")
    }

    /// The port of the replica of the master on `port`.
    pub fn replica_of(&self, port: u16) -> u16 {
        let master = self.node_id(port);
        self.nodes
            .iter()
            .find(|n| {
                let nodes: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query(&mut n.conn())
                    .unwrap_or_default();
                nodes.lines().any(|l| {
                    let f: Vec<&str> = l.split(' ').collect();
                    f.len() > 3
                        && f[2].contains("myself")
                        && f[2].contains("slave")
                        && f[3] == master
                })
            })
            .map(RedisServer::port)
            .expect("a replica of that master")
    }

    /// Waits until the replica on `replica` has every write its master on `master` has made
    /// so far (its replication offset caught up, the link up).
    pub fn wait_replica_synced(&self, master: u16, replica: u16, limit: Duration) {
        let field = |info: &str, name: &str| -> Option<i64> {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
        };
        let info = |port: u16| -> String {
            redis::cmd("INFO")
                .arg("replication")
                .query(&mut self.node(port).conn())
                .unwrap_or_default()
        };
        let target = field(&info(master), "master_repl_offset:").expect("master offset");
        let deadline = Instant::now() + limit;
        loop {
            let theirs = info(replica);
            let caught_up = field(&theirs, "slave_repl_offset:").is_some_and(|o| o >= target);
            if theirs.contains("master_link_status:up") && caught_up {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "replica {replica} not in sync: {theirs}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts moving `slot` from the master on `from` to the one on `to`: IMPORTING on the
    /// target, MIGRATING on the source. Until [`finish_migration`](Self::finish_migration),
    /// keys of the slot that are gone from the source answer ASK.
    pub fn begin_migration(&self, slot: u16, from: u16, to: u16) {
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("IMPORTING")
            .arg(&from_id)
            .query(&mut self.node(to).conn())
            .expect("SETSLOT IMPORTING");
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("MIGRATING")
            .arg(&to_id)
            .query(&mut self.node(from).conn())
            .expect("SETSLOT MIGRATING");
    }

    /// Moves the slot's remaining keys (MIGRATE) and gives the slot to the target on every
    /// master (SETSLOT NODE).
    pub fn finish_migration(&self, slot: u16, from: u16, to: u16) {
        let mut source = self.node(from).conn();
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100)
                .query(&mut source)
                .expect("GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            let _: () = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(to)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys)
                .query(&mut source)
                .expect("MIGRATE");
        }
        let to_id = self.node_id(to);
        for port in [to, from] {
            let _: () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(&to_id)
                .query(&mut self.node(port).conn())
                .expect("SETSLOT NODE");
        }
        let others: Vec<u16> = self.nodes.iter().map(RedisServer::port).collect();
        for port in others.into_iter().filter(|p| *p != to && *p != from) {
            let _ = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(&to_id)
                .query::<()>(&mut self.node(port).conn());
        }
    }

    /// The slot of `key`.
    pub fn slot_of(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].conn())
            .expect("CLUSTER KEYSLOT")
    }

    /// Waits until the node on `asked` says `key` is served by the master on `port`.
    pub fn wait_until_owner(&self, key: &str, port: u16, asked: u16, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.owner_asking(key, asked) != Some(port) {
            assert!(
                Instant::now() < deadline,
                "{key} not served by {port} within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn owner_asking(&self, key: &str, asked: u16) -> Option<u16> {
        let mut conn = self.node(asked).conn();
        let slot = self.slot_of(key);
        let ranges: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut conn).ok()?;
        ranges.into_iter().find_map(|range| match range {
            redis::Value::Array(items) => match items.as_slice() {
                [
                    redis::Value::Int(a),
                    redis::Value::Int(b),
                    redis::Value::Array(master),
                    ..,
                ] if (*a as u16..=*b as u16).contains(&slot) => match master.as_slice() {
                    [_, redis::Value::Int(port), ..] => Some(*port as u16),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        })
    }

    fn wait_until_ok(&self) {
        let deadline = Instant::now() + READY_LIMIT;
        for node in &self.nodes {
            let mut conn = node.conn();
            loop {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut conn)
                    .unwrap_or_default();
                if info.contains("cluster_state:ok") {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "cluster not ok within {READY_LIMIT:?}: {info}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}
