//! A Redis Cluster of three masters.

use std::time::{Duration, Instant};

use super::error::ServerError;
use super::server::{Options, ServerBinary, TestServer};
use crate::config::Config;

/// How long the nodes may take to meet and call the cluster ok.
const READY_LIMIT: Duration = Duration::from_secs(30);

/// The hash slots of a cluster.
const SLOTS: u16 = 16384;

/// A Redis Cluster on 127.0.0.1 (`--cluster-enabled yes`): three masters by
/// [`start`](Self::start), or as many masters and replicas as
/// [`start_with`](Self::start_with) asks; the slots split in even ranges among the masters,
/// each node in a folder of its own, all killed when dropped. Formed with
/// `CLUSTER ADDSLOTSRANGE`, `CLUSTER MEET` and `CLUSTER REPLICATE` (no `redis-cli` needed).
pub struct Cluster {
    /// The masters in the order of their slot ranges, then the replicas.
    nodes: Vec<TestServer>,
    masters: usize,
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
        Self::start_with(3, 0, Options::default())
    }

    /// `masters` masters (at least one), each with `replicas` replicas, every node a server of
    /// `options` (ACL users, TLS: with [`Options::tls`] the nodes also speak TLS on the
    /// cluster bus when `options` say `--tls-cluster yes`); returns once every node says
    /// `cluster_state:ok` and knows every other, and every replica's link to its master is up.
    /// Replica `k` (counting from 0 after the masters) serves master `k % masters`.
    pub fn start_with(
        masters: usize,
        replicas: usize,
        options: Options,
    ) -> Result<Self, ServerError> {
        if masters == 0 {
            return Err(ServerError::Cluster("a cluster needs a master".into()));
        }
        let binary = match options.bin.clone() {
            Some(bin) => bin,
            None => ServerBinary::find()?.bin,
        };
        let mut node_options = options;
        node_options.bin = Some(binary);
        node_options.args = ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"]
            .map(String::from)
            .into_iter()
            .chain(std::mem::take(&mut node_options.args))
            .collect();
        let nodes = (0..masters * (1 + replicas))
            .map(|_| TestServer::start_with(node_options.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let cluster = Self { nodes, masters };
        for (i, node) in cluster.nodes[..masters].iter().enumerate() {
            let (first, last) = cluster.range(i);
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
        if replicas > 0 {
            let ids = cluster.nodes[..masters]
                .iter()
                .map(|m| Ok(redis::cmd("CLUSTER").arg("MYID").query(&mut m.conn()?)?))
                .collect::<Result<Vec<String>, ServerError>>()?;
            // A node replicates a master it knows by its id: wait until the gossip brought
            // every master's id to every node (a node in handshake has a temporary one).
            cluster.wait_for("every node to know every master", |conn| {
                let known: String = redis::cmd("CLUSTER").arg("NODES").query(conn)?;
                Ok(
                    !known.contains("handshake")
                        && ids.iter().all(|id| known.contains(id.as_str())),
                )
            })?;
            for (k, replica) in cluster.nodes[masters..].iter().enumerate() {
                let _: () = redis::cmd("CLUSTER")
                    .arg("REPLICATE")
                    .arg(&ids[k % masters])
                    .query(&mut replica.conn()?)?;
            }
        }
        let all = cluster.nodes.len();
        cluster.wait_for("cluster_state:ok", |conn| {
            let info: String = redis::cmd("CLUSTER").arg("INFO").query(conn)?;
            let known: String = redis::cmd("CLUSTER").arg("NODES").query(conn)?;
            let replication: String = redis::cmd("INFO").arg("replication").query(conn)?;
            let synced = replication.contains("role:master")
                || replication.contains("master_link_status:up");
            Ok(info.contains("cluster_state:ok") && known.lines().count() == all && synced)
        })?;
        Ok(cluster)
    }

    /// A [`Config`] as an application would write it: `Config::cluster(<every node's URL>)`,
    /// with the settings of [`TestServer::config`] for quick tests (response and connect
    /// timeouts of 500 ms, a watchdog timeout of 3 s, Redis called unavailable after 2 s). No
    /// link: the manager reaches the nodes straight. A password or TLS files of the nodes'
    /// [`Options`] are not in it: add them with `Config`'s own methods.
    pub fn config(&self) -> Config {
        Config::cluster(self.urls())
            .response_timeout(Duration::from_millis(500))
            .connect_timeout(Duration::from_millis(500))
            .watchdog_timeout(Duration::from_secs(3))
            .unavailable_after(Duration::from_secs(2))
    }

    /// `redis://127.0.0.1:<port>` of each node (with TLS, `rediss://localhost:<port>`).
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| {
                let url = n.url();
                url.strip_suffix("/0").map(str::to_owned).unwrap_or(url)
            })
            .collect()
    }

    /// The nodes: the masters in the order of their slot ranges (with three: 0-5460,
    /// 5461-10921, 10922-16383), then the replicas (whatever their roles now).
    pub fn nodes(&self) -> &[TestServer] {
        &self.nodes
    }

    /// The node on `port`, to stop, pause, restart or look into.
    pub fn node_mut(&mut self, port: u16) -> Option<&mut TestServer> {
        self.nodes.iter_mut().find(|n| n.port() == port)
    }

    /// The master that serves `key` (a lock's name: its keys and channels share its slot) as
    /// the cluster was formed (before any failover or slot move), to look into
    /// ([`TestServer::holder`]) or to stop, pause or [`lose`](TestServer::lose) it.
    pub fn node_for(&self, key: &str) -> Result<&TestServer, ServerError> {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].conn()?)?;
        let i = (0..self.masters)
            .find(|&i| slot <= self.range(i).1)
            .unwrap_or(self.masters - 1);
        Ok(&self.nodes[i])
    }

    /// The slots master `i` serves: an even share each, the last one to 16383.
    fn range(&self, i: usize) -> (u16, u16) {
        let share = SLOTS as usize / self.masters;
        let first = share * i;
        let last = match i + 1 == self.masters {
            true => SLOTS as usize - 1,
            false => first + share - 1,
        };
        (first as u16, last as u16)
    }

    /// Polls every node with `check` (every 50 ms) until it holds on each; an error from it
    /// counts as "not yet", and is told at the limit.
    fn wait_for(
        &self,
        what: &str,
        mut check: impl FnMut(&mut redis::Connection) -> Result<bool, ServerError>,
    ) -> Result<(), ServerError> {
        let deadline = Instant::now() + READY_LIMIT;
        for node in &self.nodes {
            loop {
                let last = match node.conn().and_then(|mut conn| check(&mut conn)) {
                    Ok(true) => break,
                    Ok(false) => String::from("not yet"),
                    Err(e) => e.to_string(),
                };
                if Instant::now() >= deadline {
                    return Err(ServerError::Cluster(format!(
                        "node {}: no {what} within {READY_LIMIT:?} (last: {last})",
                        node.port()
                    )));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }
}
