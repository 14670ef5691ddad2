//! The suite's Redis Cluster: `lockman::testing::Cluster` (its methods, through `Deref`), with
//! what only this suite does to a cluster: moving a slot by hand, finding a master's replica,
//! waiting until a replica caught up, counting keys on every node. Calls panic (failing the
//! test) instead of returning errors.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockman::testing::{Options, TestServer};

use super::certs::TestCerts;

/// The nodes of one cluster, killed when dropped.
pub struct Cluster {
    kit: lockman::testing::Cluster,
    /// The certificates a TLS cluster's nodes read (again at a restart): kept while it lives.
    _certs: Option<Arc<TestCerts>>,
}

impl Deref for Cluster {
    type Target = lockman::testing::Cluster;
    fn deref(&self) -> &Self::Target {
        &self.kit
    }
}

impl DerefMut for Cluster {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.kit
    }
}

impl Cluster {
    /// `masters` masters with `replicas` replicas each, every slot assigned.
    pub fn start(masters: usize, replicas: usize) -> Self {
        Self::start_with(masters, replicas, &[])
    }

    /// As [`start`](Self::start), each node with more arguments (ACL users, say).
    pub fn start_with(masters: usize, replicas: usize, args: &[String]) -> Self {
        let options = Options::default().args(args.iter().cloned());
        Self::start_kit(masters, replicas, options, None)
    }

    /// A cluster that speaks only TLS, to clients and on its bus, with certificates of `certs`.
    /// Nodes announce themselves as `localhost` (the name the test certificate is for), so that
    /// clients that follow the cluster's topology can check the certificates. On the bus a node
    /// is also a TLS client, and Redis always asks for a client certificate there: each presents
    /// the test client certificate.
    pub fn start_tls(masters: usize, certs: Arc<TestCerts>) -> Self {
        let file = |name: &str| certs.file(name).display().to_string();
        let options = Options::default()
            .tls(certs.tls_files(false))
            .args([
                "--tls-client-cert-file".to_owned(),
                file("client.pem"),
                "--tls-client-key-file".to_owned(),
                file("client.key"),
            ])
            .args([
                "--tls-cluster",
                "yes",
                "--tls-replication",
                "yes",
                "--cluster-announce-hostname",
                "localhost",
                "--cluster-preferred-endpoint-type",
                "hostname",
            ]);
        Self::start_kit(masters, 0, options, Some(certs))
    }

    fn start_kit(
        masters: usize,
        replicas: usize,
        options: Options,
        certs: Option<Arc<TestCerts>>,
    ) -> Self {
        let binary = super::server();
        match lockman::testing::Cluster::start_with(masters, replicas, options) {
            Ok(kit) => Self { kit, _certs: certs },
            Err(e) => panic!("could not start a cluster of {}: {e}", binary.version),
        }
    }

    /// The port of the master that serves `key` now (as the first node sees it).
    pub fn owner_of(&self, key: &str) -> u16 {
        let first = self.nodes()[0].port();
        self.owner_asking(key, first)
            .expect("every slot has a master")
    }

    /// The node listening on `port`.
    pub fn node(&self, port: u16) -> &TestServer {
        self.nodes()
            .iter()
            .find(|n| n.port() == port)
            .expect("a node of this cluster")
    }

    /// Keys on every node together (DBSIZE summed over the masters and replicas).
    pub fn total_keys(&self) -> u64 {
        self.nodes()
            .iter()
            .map(|n| {
                n.conn()
                    .and_then(|mut c| Ok(redis::cmd("DBSIZE").query::<u64>(&mut c)?))
                    .unwrap_or(0)
            })
            .sum()
    }

    /// The keys of every node but the client records (`lockman_client:{lockman}…`), which a
    /// manager writes at its first use of a name, whatever the name's fate.
    pub fn lock_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .nodes()
            .iter()
            .flat_map(|n| n.keys_left().unwrap_or_default())
            .filter(|k| !k.starts_with("lockman_client:{lockman}"))
            .collect();
        keys.sort();
        keys
    }

    /// The node id of the node on `port`.
    pub fn node_id(&self, port: u16) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut super::raw(self.node(port)))
            .expect("CLUSTER MYID")
    }

    /// The port of the replica of the master on `port`.
    pub fn replica_of(&self, port: u16) -> u16 {
        let master = self.node_id(port);
        self.nodes()
            .iter()
            .find(|n| {
                let nodes: String = n
                    .conn()
                    .and_then(|mut c| Ok(redis::cmd("CLUSTER").arg("NODES").query(&mut c)?))
                    .unwrap_or_default();
                nodes.lines().any(|l| {
                    let f: Vec<&str> = l.split(' ').collect();
                    f.len() > 3
                        && f[2].contains("myself")
                        && f[2].contains("slave")
                        && f[3] == master
                })
            })
            .map(TestServer::port)
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
                .query(&mut super::raw(self.node(port)))
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
            .query(&mut super::raw(self.node(to)))
            .expect("SETSLOT IMPORTING");
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("MIGRATING")
            .arg(&to_id)
            .query(&mut super::raw(self.node(from)))
            .expect("SETSLOT MIGRATING");
    }

    /// Moves the slot's remaining keys (MIGRATE) and gives the slot to the target on every
    /// master (SETSLOT NODE).
    pub fn finish_migration(&self, slot: u16, from: u16, to: u16) {
        let mut source = super::raw(self.node(from));
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
                .query(&mut super::raw(self.node(port)))
                .expect("SETSLOT NODE");
        }
        let others = self
            .nodes()
            .iter()
            .filter(|n| n.port() != to && n.port() != from);
        for node in others {
            if let Ok(mut conn) = node.conn() {
                let _ = redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&to_id)
                    .query::<()>(&mut conn);
            }
        }
    }

    /// The slot of `key`.
    pub fn slot_of(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut super::raw(&self.nodes()[0]))
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
        let mut conn = self.node(asked).conn().ok()?;
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
}
