//! What the kit answers when it fails.

use std::ffi::OsString;

/// Why a [`TestServer`](super::TestServer) could not start, or a command of the kit failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The server binary could not be run: not installed, not on the `PATH`, or
    /// `REDIS_SERVER_BIN` names nothing runnable.
    #[error(
        "cannot run {bin:?} ({source}): install redis-server or valkey-server (Debian: apt-get \
         install redis-server; macOS: brew install redis) or set REDIS_SERVER_BIN to its path"
    )]
    Missing {
        /// The binary tried.
        bin: OsString,
        /// What running it said.
        source: std::io::Error,
    },
    /// The binary ran but no server answered on its port (it exited, or did not answer PING
    /// within 10 s): the last lines of its log say why.
    #[error("{server} did not start on port {port}: {reason}")]
    NotStarted {
        /// The binary and its version, as `--version` said (`Redis server v=7.0.15`).
        server: String,
        /// The port it was given.
        port: u16,
        /// Its exit status or the time-out, and the end of its log.
        reason: String,
    },
    /// The temp folder, a port or the proxy's thread could not be had.
    #[error("test server: {0}")]
    Io(#[from] std::io::Error),
    /// A command the kit sent the server failed (a paused server: a time-out).
    #[error("test server command: {0}")]
    Redis(#[from] redis::RedisError),
    /// A [`SentinelGroup`](super::SentinelGroup) did not come together or did not fail over
    /// in time (the sentinels' logs are in the text), or was asked about a server it lacks.
    #[error("sentinel group: {0}")]
    Sentinel(String),
    /// A [`Cluster`](super::Cluster) did not come together in time.
    #[error("cluster: {0}")]
    Cluster(String),
}
