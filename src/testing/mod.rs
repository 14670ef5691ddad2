//! A kit for testing your own code's bad day (`testing` feature): a throwaway Redis or Valkey
//! server, a link to it that can be cut, and faults on demand.
//!
//! lockman tells a holder when its lock is gone (a guard's `lost()`,
//! [`LockGuard::scope`](crate::LockGuard::scope), `valid_until()`), answers
//! [`LockError::Deadlock`](crate::LockError::Deadlock) and
//! [`LockError::Unavailable`](crate::LockError::Unavailable). The code that handles those answers
//! is yours; this module lets `cargo test` reach it, against a real server (no mock):
//!
//! - [`TestServer::start`]: `redis-server` or `valkey-server` (from `REDIS_SERVER_BIN`, else
//!   `redis-server` on the `PATH`) on a free loopback port, in a temp folder of its own, nothing
//!   saved to disk, killed when dropped (on Linux with `setpriv`, also when the test process
//!   dies without dropping it: docs/testing.md says what is cleaned up when). No binary:
//!   [`ServerError::Missing`], naming it.
//! - [`TestServer::config`]: a [`Config`](crate::Config) that reaches the server through a
//!   [`Link`], a TCP proxy the kit runs on a thread of its own, so that this client can be cut
//!   off ([`TestServer::cut`]) while the others go on. [`TestServer::link`] gives more links,
//!   one per client you want to cut alone.
//! - Faults: [`TestServer::lose`], [`TestServer::expire`], [`TestServer::pause`],
//!   [`TestServer::restart_empty`]; on a link, [`Link::cut`], [`Link::drop_replies`],
//!   [`Link::hold`] (traffic held back, delivered late), [`Link::heal_new_only`] and
//!   [`Link::forget_pubsub`] (flows a middlebox forgot), ended by [`Link::heal`] or
//!   [`Link::release`]. Each one's doc says what the application sees.
//! - Looks: [`TestServer::holder`], [`TestServer::waiters`], [`TestServer::keys_left`].
//! - [`SentinelGroup::start`]: a primary, a replica and three sentinels;
//!   [`SentinelGroup::config`] a `Config::sentinel(...)` for them; faults
//!   [`SentinelGroup::failover`] (a switch-over) and [`SentinelGroup::kill_primary`] (a crash),
//!   each returning the new primary's port once the sentinels agree on it.
//! - [`Cluster::start`]: a Redis Cluster of three masters ([`Cluster::start_with`]: masters
//!   and replicas of your choice); [`Cluster::config`] a `Config::cluster(...)` for it;
//!   [`Cluster::node_for`] the node serving a name.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use lockman::LockManager;
//! use lockman::testing::TestServer;
//!
//! let server = TestServer::start()?;
//! let manager = LockManager::start(server.config()?).await?;
//! let guard = manager.lock("orders:42").acquire().await?;
//! server.lose("orders:42")?;      // as a failover that did not reach the replica
//! guard.lost().await;             // the watch (or the next renewal) finds the key gone
//! # Ok(()) }
//! ```
//!
//! Nothing here is shared between servers, and every port is free when taken: tests using the
//! kit run in parallel, from `#[tokio::test]`, `#[actix_rt::test]` or plain `#[test]`. The calls
//! are blocking (a loopback round trip, bounded by a timeout), so they work from any of them.
//! Unix only (the server is a child process, paused with `kill -STOP`).

mod cluster;
mod error;
mod link;
mod options;
mod sentinel;
mod server;
mod spawner;

pub use cluster::Cluster;
pub use error::ServerError;
pub use link::Link;
#[cfg(feature = "tls")]
pub use options::TlsFiles;
pub use options::{Options, ServerBinary};
pub use sentinel::SentinelGroup;
pub use server::{TestServer, free_port};
