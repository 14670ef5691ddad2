//! The suite's Sentinel deployment: `lockman::testing::SentinelGroup` (a primary, its
//! replicas and three sentinels watching it as [`MASTER`] with a quorum of 2; its methods,
//! through `Deref`), with the suite's conveniences that panic (failing the test) instead of
//! returning errors. The data servers ask for [`DATA_PASSWORD`], the sentinels for
//! [`SENTINEL_PASSWORD`]: clients must give both.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use lockman::testing::TestServer;

/// The kit's group.
type Kit = lockman::testing::SentinelGroup;

/// The name the sentinels know the primary by.
pub const MASTER: &str = Kit::MASTER;
/// The password of the primary and the replica (`default` user).
pub const DATA_PASSWORD: &str = Kit::DATA_PASSWORD;
/// The password of the sentinels.
pub const SENTINEL_PASSWORD: &str = Kit::SENTINEL_PASSWORD;

/// A primary, its replicas and three sentinels, killed when dropped.
pub struct SentinelGroup(Kit);

impl Deref for SentinelGroup {
    type Target = Kit;
    fn deref(&self) -> &Kit {
        &self.0
    }
}

impl DerefMut for SentinelGroup {
    fn deref_mut(&mut self) -> &mut Kit {
        &mut self.0
    }
}

impl SentinelGroup {
    /// Starts a primary, one replica and three sentinels (down-after 1 s), and waits until each
    /// sentinel knows the replica and the two other sentinels (so that a failover can be
    /// agreed on).
    pub fn start() -> Self {
        Self::start_with(1, Duration::from_millis(1000))
    }

    /// `replicas` replicas, and sentinels that call the primary down after `down_after` without
    /// an answer.
    pub fn start_with(replicas: usize, down_after: Duration) -> Self {
        let binary = super::server();
        match Kit::start_with(replicas, down_after) {
            Ok(group) => Self(group),
            Err(e) => panic!(
                "could not start a Sentinel group of {}: {e}",
                binary.version
            ),
        }
    }

    /// A blocking connection to the first sentinel.
    pub fn sentinel_conn(&self) -> redis::Connection {
        let url = self.sentinel_urls().into_iter().next().expect("a sentinel");
        redis::Client::open(url)
            .and_then(|c| c.get_connection())
            .expect("connect to a sentinel")
    }

    /// A blocking connection to the data server on `port`.
    pub fn data_conn(port: u16) -> Option<redis::Connection> {
        redis::Client::open(format!("redis://:{DATA_PASSWORD}@127.0.0.1:{port}"))
            .and_then(|c| c.get_connection())
            .ok()
    }

    /// The port of the primary as the sentinels see it.
    pub fn primary_port(&self) -> u16 {
        self.0
            .primary_port()
            .expect("SENTINEL GET-MASTER-ADDR-BY-NAME")
    }

    /// The data server on `port`.
    pub fn server(&mut self, port: u16) -> &mut TestServer {
        self.0.server(port).expect("a server of the group")
    }

    /// The data server that is not on `port` (with one replica: the other one).
    pub fn other(&mut self, port: u16) -> &mut TestServer {
        let other = self
            .servers()
            .iter()
            .map(TestServer::port)
            .find(|p| *p != port)
            .expect("a server of the group");
        self.server(other)
    }

    /// Waits until the sentinels name another primary than `old` and that server says it is
    /// the primary; returns its port. Panics after the kit's limit (30 s).
    pub fn wait_for_new_primary(&self, old: u16) -> u16 {
        self.0.wait_for_new_primary(old).expect("a new primary")
    }

    /// Waits until the server on `port` says it is a replica (a demoted primary refuses
    /// writes from then on). Panics after the kit's limit (30 s).
    pub fn wait_until_replica(&self, port: u16) {
        self.0
            .wait_until_replica(port)
            .expect("the old primary demoted");
    }
}
