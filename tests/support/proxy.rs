//! The kit's link (`lockman::testing::Link`) under the name the suite knows: a TCP proxy on
//! loopback between a client and a throwaway server, on a thread and runtime of its own, which a
//! test can cut (nothing passes either way from then on, as in a network partition of that
//! client alone).

use std::net::SocketAddr;

use lockman::testing::Link;

/// A running proxy; closed (its connections with it) when dropped.
pub struct Proxy(Link);

impl Proxy {
    /// Listens on a free loopback port and forwards each connection to `target`.
    pub fn start(target: SocketAddr) -> Self {
        Self(Link::start(target).expect("the proxy listens"))
    }

    /// `redis://127.0.0.1:PORT/0`: the proxy's address as a Redis URL.
    pub fn url(&self) -> String {
        self.0.url()
    }

    /// Cuts every connection through the proxy, and those made after: see `Link::cut`.
    pub fn cut(&mut self) {
        self.0.cut();
    }
}
