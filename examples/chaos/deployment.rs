//! Where the workers' locks live: one server, a Sentinel group (a primary, two replicas, three
//! sentinels) or a Redis Cluster (three masters with a replica each), all on loopback; and what
//! the runner does to them for the faults that only a replicated deployment has.

use std::time::{Duration, Instant};

use crate::options::Fault;
use crate::support::cluster::Cluster;
use crate::support::sentinel::{DATA_PASSWORD, MASTER, SentinelGroup};
use crate::support::{Options as ServerOptions, RedisServer};
use lockman::testing::TestServer;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    Single,
    Sentinel,
    Cluster,
}

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::Single => "single",
            Shape::Sentinel => "sentinel",
            Shape::Cluster => "cluster",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        [Shape::Single, Shape::Sentinel, Shape::Cluster]
            .into_iter()
            .find(|s| s.name() == name)
    }
}

/// How long the sentinels wait for a silent primary before they call it down: longer than the
/// `stall-redis` fault (0.8 s), so that a stall does not turn into a failover.
const DOWN_AFTER: Duration = Duration::from_millis(1500);
/// How long a failover, a demotion or a slot move may take before the fault counts as failed.
pub const LIMIT: Duration = Duration::from_secs(30);
/// How long a cluster's manual failover is waited for before it is asked again: past Redis's
/// own manual-failover timeout (5 s), after which the replica has given it up.
const MANUAL_FAILOVER_RETRY: Duration = Duration::from_secs(6);

pub enum Deployment {
    /// One server, with `appendonly yes` and `appendfsync always`, so that it can be restarted
    /// with its data or, its files wiped, without.
    Single(RedisServer),
    Sentinel(SentinelGroup),
    Cluster(Cluster),
}

impl Deployment {
    /// Starts the deployment; a single server's process (and each of its restarts) has `env`
    /// added to its environment (libfaketime's clock for `clock-server`; the other shapes
    /// emulate that step and take none).
    pub fn start(shape: Shape, env: Vec<(String, String)>) -> Self {
        match shape {
            Shape::Single => Deployment::Single(RedisServer::start_with(ServerOptions {
                args: ["--appendonly", "yes", "--appendfsync", "always"]
                    .map(String::from)
                    .to_vec(),
                env,
                ..ServerOptions::default()
            })),
            Shape::Sentinel => Deployment::Sentinel(SentinelGroup::start_with(2, DOWN_AFTER)),
            Shape::Cluster => Deployment::Cluster(Cluster::start(3, 1)),
        }
    }

    pub fn shape(&self) -> Shape {
        match self {
            Deployment::Single(_) => Shape::Single,
            Deployment::Sentinel(_) => Shape::Sentinel,
            Deployment::Cluster(_) => Shape::Cluster,
        }
    }

    /// What a worker is told, as one argument: `single|<url>`, `sentinel|<sentinel urls>` or
    /// `cluster|<node urls>` (URLs joined by commas); [`config`] reads it.
    pub fn target(&self) -> String {
        match self {
            Deployment::Single(server) => format!("single|{}", server.url()),
            Deployment::Sentinel(group) => format!("sentinel|{}", group.sentinel_urls().join(",")),
            Deployment::Cluster(cluster) => format!("cluster|{}", cluster.urls().join(",")),
        }
    }

    /// Where the fair heads' sampler finds the locks' keys.
    pub fn locator(&self) -> crate::heads::Locator {
        use crate::heads::Locator;
        match self {
            Deployment::Single(server) => Locator::Single(server.url()),
            Deployment::Sentinel(group) => Locator::Sentinel {
                sentinel: group.sentinel_urls().first().cloned().unwrap_or_default(),
                master: MASTER.into(),
                password: DATA_PASSWORD.into(),
            },
            Deployment::Cluster(cluster) => {
                Locator::Cluster(cluster.nodes().iter().map(TestServer::port).collect())
            }
        }
    }

    /// The servers that take writes now: the server, the primary, the masters.
    pub fn primaries(&self) -> Vec<&TestServer> {
        match self {
            Deployment::Single(server) => vec![&**server],
            Deployment::Sentinel(group) => {
                group.servers().iter().filter(|s| is_master(s)).collect()
            }
            Deployment::Cluster(cluster) => {
                cluster.nodes().iter().filter(|s| is_master(s)).collect()
            }
        }
    }

    /// The lock names of `names` (each with the keys it locks) whose keys live on the
    /// primary on `port`: every name for a Sentinel group, the names a master serves in a
    /// cluster.
    pub fn names_on(&self, port: u16, names: &[(String, Vec<String>)]) -> Vec<String> {
        match self {
            Deployment::Cluster(cluster) => names
                .iter()
                .filter(|(_, keys)| keys.iter().any(|k| cluster.owner_of(k) == port))
                .map(|(name, _)| name.clone())
                .collect(),
            _ => names.iter().map(|(name, _)| name.clone()).collect(),
        }
    }

    /// Fails over the primary (or the master) on `port` as `fault` says, and returns once a
    /// replica took over and the old primary serves again as a replica.
    pub fn fail_over(&mut self, fault: Fault, port: u16) -> Result<(), String> {
        match self {
            Deployment::Single(_) => Err("a single server has no replica".into()),
            Deployment::Sentinel(group) => sentinel_failover(group, fault, port),
            Deployment::Cluster(cluster) => cluster_failover(cluster, fault, port),
        }
    }

    /// Makes the deployment whole again after a fault the runner could not carry out to its
    /// end (a failover refused, aborted or never finished; a panic half-way): every server of
    /// it running and not frozen ([`wake`]), one primary that the sentinels name (or every slot
    /// served), and every other server its replica with the link up. Returns once it is, or
    /// fails after [`LIMIT`].
    pub fn settle(&mut self) -> Result<(), String> {
        match self {
            Deployment::Single(server) => {
                wake(server);
                Ok(())
            }
            Deployment::Sentinel(group) => {
                let ports: Vec<u16> = group.servers().iter().map(TestServer::port).collect();
                for port in ports {
                    wake(group.server(port));
                }
                until("the Sentinel group whole again", || {
                    sentinel_primary(group).is_some_and(|p| {
                        group.servers().iter().all(|s| {
                            if s.port() == p {
                                is_master(s)
                            } else {
                                is_replica(s)
                            }
                        })
                    })
                })
            }
            Deployment::Cluster(cluster) => {
                let ports: Vec<u16> = cluster.nodes().iter().map(TestServer::port).collect();
                for port in ports {
                    cluster.node_mut(port).into_iter().for_each(wake);
                }
                until("the cluster whole again", || {
                    cluster
                        .nodes()
                        .iter()
                        .all(|n| cluster_ok(n) && (is_master(n) || is_replica(n)))
                })
            }
        }
    }

    /// Moves the slot of `key` to another master while workers use it: IMPORTING / MIGRATING
    /// for a moment (keys already moved answer ASK), then MIGRATE and SETSLOT NODE.
    pub fn reshard(&mut self, key: &str, pick: u64) -> Result<(), String> {
        let Deployment::Cluster(cluster) = self else {
            return Err("only a cluster has slots".into());
        };
        let slot = cluster.slot_of(key);
        let from = cluster.owner_of(key);
        let others: Vec<u16> = cluster
            .nodes()
            .iter()
            .filter(|n| n.port() != from && is_master(n))
            .map(TestServer::port)
            .collect();
        if others.is_empty() {
            return Err("no other master".into());
        }
        let to = others[pick as usize % others.len()];
        cluster.begin_migration(slot, from, to);
        std::thread::sleep(Duration::from_millis(200));
        cluster.finish_migration(slot, from, to);
        until("the slot's new owner", || cluster.owner_of(key) == to)
    }
}

/// The shape of the deployment `target` names (see [`Deployment::target`]), and the lockman
/// configuration a worker uses for it.
pub fn config(target: &str) -> Option<(Shape, lockman::Config)> {
    let (shape, urls) = target.split_once('|')?;
    let shape = Shape::parse(shape)?;
    let urls = urls.split(',').filter(|u| !u.is_empty());
    let config = match shape {
        Shape::Single => lockman::Config::new(urls.into_iter().next()?),
        Shape::Sentinel => lockman::Config::sentinel(MASTER, urls).master_auth(None, DATA_PASSWORD),
        Shape::Cluster => lockman::Config::cluster(urls),
    };
    Some((shape, config))
}

fn sentinel_failover(group: &mut SentinelGroup, fault: Fault, old: u16) -> Result<(), String> {
    match fault {
        Fault::FailoverKill => group.server(old).stop(),
        Fault::FailoverManual => {
            // A sentinel refuses while an earlier failover is still settling, and may accept
            // one that it then aborts (no replica good enough yet): ask until a replica is
            // promoted.
            let deadline = Instant::now() + LIMIT;
            loop {
                let asked = redis::cmd("SENTINEL")
                    .arg("FAILOVER")
                    .arg(MASTER)
                    .query::<()>(&mut group.sentinel_conn());
                let promoted = asked.is_ok()
                    && until_within(Duration::from_secs(10), || {
                        sentinel_primary(group).is_some_and(|p| p != old)
                    });
                if promoted {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "SENTINEL FAILOVER: no new primary within {LIMIT:?}"
                    ));
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        // Frozen past the sentinels' down-after time: they promote a replica, and the old
        // primary, once it runs again, believes for a moment that it still is the primary.
        // (`LIMIT` at most: the runner resumes it itself, well before.)
        Fault::PartitionPrimary => group
            .server(old)
            .pause(LIMIT)
            .map_err(|e| format!("pause the primary: {e}"))?,
        other => return Err(format!("{} is not a failover", other.name())),
    }
    let promoted = until("a new primary", || {
        sentinel_primary(group).is_some_and(|p| {
            p != old
                && group
                    .servers()
                    .iter()
                    .any(|s| s.port() == p && is_master(s))
        })
    });
    let back = match fault {
        Fault::FailoverKill => group.server(old).restart(),
        Fault::PartitionPrimary => group.server(old).resume(),
        _ => Ok(()),
    };
    promoted?;
    back.map_err(|e| format!("the old primary back: {e}"))?;
    until("the old primary demoted", || is_replica(group.server(old)))
}

fn cluster_failover(cluster: &mut Cluster, fault: Fault, master: u16) -> Result<(), String> {
    let replica = cluster.replica_of(master);
    let node = |c: &mut Cluster, port: u16| -> usize {
        c.nodes().iter().position(|n| n.port() == port).unwrap_or(0)
    };
    let (m, r) = (node(cluster, master), node(cluster, replica));
    let promoted_now = |c: &Cluster| is_master(&c.nodes()[r]) && cluster_ok(&c.nodes()[r]);
    let promoted = match fault {
        Fault::FailoverKill => {
            cluster
                .node_mut(master)
                .into_iter()
                .for_each(TestServer::stop);
            until("the replica promoted", || promoted_now(cluster))
        }
        Fault::FailoverManual => {
            // The replica waits until it has every write of its master, then takes over. Redis
            // aborts a manual failover that has not completed within its own 5 s
            // (CLUSTER_MF_TIMEOUT), as it may on a loaded machine: ask again until LIMIT.
            let deadline = Instant::now() + LIMIT;
            loop {
                redis::cmd("CLUSTER")
                    .arg("FAILOVER")
                    .query::<()>(&mut crate::support::raw(&cluster.nodes()[r]))
                    .map_err(|e| format!("CLUSTER FAILOVER: {e}"))?;
                let left = deadline.saturating_duration_since(Instant::now());
                if until_within(left.min(MANUAL_FAILOVER_RETRY), || promoted_now(cluster)) {
                    break Ok(());
                }
                if Instant::now() >= deadline {
                    break Err(format!("the replica promoted: not within {LIMIT:?}"));
                }
            }
        }
        other => return Err(format!("{} is not a cluster failover", other.name())),
    };
    if fault == Fault::FailoverKill {
        // Back with its node file: it rejoins as the replica of the master that replaced it.
        if let Some(Err(e)) = cluster.node_mut(master).map(TestServer::restart) {
            return Err(format!("the old master back: {e}"));
        }
    }
    promoted?;
    until("the old master demoted", || {
        is_replica(&cluster.nodes()[m]) && cluster.nodes().iter().all(cluster_ok)
    })
}

/// The primary's port as the first sentinel sees it.
fn sentinel_primary(group: &SentinelGroup) -> Option<u16> {
    let (_, port): (String, u16) = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(MASTER)
        .query(&mut group.sentinel_conn())
        .ok()?;
    Some(port)
}

/// `cmd` on `server`, given half a second to connect and to answer; `None` when it does not.
fn ask<T: redis::FromRedisValue>(server: &TestServer, cmd: &redis::Cmd) -> Option<T> {
    if !server.is_running() {
        return None;
    }
    let limit = Duration::from_millis(500);
    let mut conn = server
        .client()
        .ok()?
        .get_connection_with_timeout(limit)
        .ok()?;
    conn.set_read_timeout(Some(limit)).ok()?;
    cmd.query(&mut conn).ok()
}

fn role(server: &TestServer) -> Option<String> {
    let role: Vec<redis::Value> = ask(server, &redis::cmd("ROLE"))?;
    match role.first() {
        Some(redis::Value::BulkString(r)) => Some(String::from_utf8_lossy(r).into_owned()),
        _ => None,
    }
}

fn is_master(server: &TestServer) -> bool {
    role(server).as_deref() == Some("master")
}

/// A replica whose link to its primary is up.
fn is_replica(server: &TestServer) -> bool {
    let mut info = redis::cmd("INFO");
    info.arg("replication");
    role(server).as_deref() == Some("slave")
        && ask::<String>(server, &info).is_some_and(|i| i.contains("master_link_status:up"))
}

fn cluster_ok(server: &TestServer) -> bool {
    let mut info = redis::cmd("CLUSTER");
    info.arg("INFO");
    ask::<String>(server, &info).is_some_and(|i| i.contains("cluster_state:ok"))
}

/// Polls `done` until it holds, or fails after [`LIMIT`].
fn until(what: &str, done: impl FnMut() -> bool) -> Result<(), String> {
    match until_within(LIMIT, done) {
        true => Ok(()),
        false => Err(format!("{what}: not within {LIMIT:?}")),
    }
}

/// Polls `done` until it holds (true) or `limit` passed (false).
fn until_within(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// Runs `server` again (restarted if stopped, resumed if frozen), after a fault left it down;
/// a server that cannot be woken is reported on stderr.
pub fn wake(server: &mut TestServer) {
    let woken = match server.is_running() {
        true => server.resume(),
        false => server.restart(),
    };
    if let Err(e) = woken {
        eprintln!("chaos: server {} not woken: {e}", server.port());
    }
}
