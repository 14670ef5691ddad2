//! A Redis Cluster of three masters.

use std::time::{Duration, Instant};

use super::error::ServerError;
use super::server::{Options, ServerBinary, TestServer};
use crate::config::Config;

/// How long the nodes may take to meet and call the cluster ok.
const READY_LIMIT: Duration = Duration::from_secs(30);

/// The hash slots of a cluster.
const SLOTS: u16 = 16384;

/// Three masters (no replicas) with `--cluster-enabled yes` on 127.0.0.1, the slots split in
/// three ranges, each node in a folder of its own, all killed when dropped. Formed with
/// `CLUSTER ADDSLOTSRANGE` and `CLUSTER MEET` (no `redis-cli` needed).
pub struct Cluster {
    nodes: Vec<TestServer>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("nodes", &self.nodes)
            .finish()
    }
}

impl Cluster {
    /// Starts three masters, gives each a third of the slots, has them meet, and returns once
    /// every node says `cluster_state:ok` and knows the two others.
    pub fn start() -> Result<Self, ServerError> {
        let binary = ServerBinary::find()?;
        let nodes = (0..3)
            .map(|_| {
                TestServer::start_with(Options::default().bin(binary.bin.clone()).args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    "2000",
                ]))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let cluster = Self { nodes };
        for (i, node) in cluster.nodes.iter().enumerate() {
            let (first, last) = Self::range(i);
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .query(&mut node.conn()?)?;
        }
        let mut first = cluster.nodes[0].conn()?;
        for node in &cluster.nodes[1..] {
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port())
                .query(&mut first)?;
        }
        cluster.wait_until_ok()?;
        Ok(cluster)
    }

    /// A [`Config`] as an application would write it: `Config::cluster(<every node's URL>)`,
    /// with the settings of [`TestServer::config`] for quick tests (response and connect
    /// timeouts of 500 ms, a watchdog timeout of 3 s, Redis called unavailable after 2 s). No
    /// link: the manager reaches the nodes straight.
    pub fn config(&self) -> Config {
        Config::cluster(self.urls())
            .response_timeout(Duration::from_millis(500))
            .connect_timeout(Duration::from_millis(500))
            .watchdog_timeout(Duration::from_secs(3))
            .unavailable_after(Duration::from_secs(2))
    }

    /// `redis://127.0.0.1:<port>` of each node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port()))
            .collect()
    }

    /// The three nodes, in the order of their slot ranges (0-5460, 5461-10921, 10922-16383).
    pub fn nodes(&self) -> &[TestServer] {
        &self.nodes
    }

    /// The node that serves `key` (a lock's name: its keys and channels share its slot), to
    /// look into ([`TestServer::holder`]) or to stop, pause or [`lose`](TestServer::lose) it.
    pub fn node_for(&self, key: &str) -> Result<&TestServer, ServerError> {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].conn()?)?;
        let i = (0..self.nodes.len())
            .find(|&i| slot <= Self::range(i).1)
            .unwrap_or(self.nodes.len() - 1);
        Ok(&self.nodes[i])
    }

    /// The slots node `i` serves: a third each, the last one to 16383.
    fn range(i: usize) -> (u16, u16) {
        let third = SLOTS / 3;
        let first = third * i as u16;
        let last = if i == 2 { SLOTS - 1 } else { first + third - 1 };
        (first, last)
    }

    fn wait_until_ok(&self) -> Result<(), ServerError> {
        let deadline = Instant::now() + READY_LIMIT;
        for node in &self.nodes {
            loop {
                let mut conn = node.conn()?;
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut conn)?;
                let known: String = redis::cmd("CLUSTER").arg("NODES").query(&mut conn)?;
                if info.contains("cluster_state:ok") && known.lines().count() == self.nodes.len() {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(ServerError::Cluster(format!(
                        "node {} not ok within {READY_LIMIT:?}: {}",
                        node.port(),
                        info.lines().next().unwrap_or_default()
                    )));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }
}
