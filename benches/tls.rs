//! Uncontended acquire + release over TLS: lockman beside redis-rs alone running the same two
//! scripts by EVALSHA over TLS (a `ConnectionManager`, as lockman uses), against the same
//! TLS-only redis-server with certificates made for this run, in the same run. Both run inside
//! an actix System and on a plain tokio runtime; each lockman figure is compared with the raw
//! loop on the same runtime (`benches/common/compare.rs`, shared with `uncontended`).
//!
//! Run: `cargo bench --bench tls` (starts its own redis-server).

mod common {
    #[path = "../common/compare.rs"]
    pub mod compare;
    #[path = "../common/floor.rs"]
    pub mod floor;
    #[path = "../common/raw.rs"]
    pub mod raw;
    #[path = "../common/stats.rs"]
    pub mod stats;
}
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;

use support::certs::TestCerts;
use support::{Options, RedisServer};

fn main() {
    let certs = Arc::new(TestCerts::generate());
    let server = RedisServer::start_with(Options {
        tls: Some(certs.clone()),
        ..Options::default()
    });
    let url = server.url();
    common::compare::uncontended(
        "uncontended acquire+release over TLS",
        || {
            let mut tls = certs.redis_certificates();
            tls.client_tls = None;
            redis::Client::build_with_tls(url.as_str(), tls).expect("tls client")
        },
        || lockman::Config::new(url.clone()).tls_ca_pem(certs.ca_pem.clone()),
    );
    drop(server);
}
