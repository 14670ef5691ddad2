//! Uncontended acquire + release over TLS: lockman beside redis-rs alone running the same two
//! scripts by EVALSHA over TLS (a `ConnectionManager`, as lockman uses), against the same
//! TLS-only redis-server with certificates made for this run, in the same run. Both run inside
//! an actix System and on a plain tokio runtime; each lockman figure is compared with the raw
//! loop on the same runtime. Criterion reports each; the closing table gives medians of
//! interleaved batches and the ratios.
//!
//! Run: `cargo bench --bench tls` (starts its own redis-server).

#[path = "common/raw.rs"]
mod raw;
#[path = "common/stats.rs"]
mod stats;
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use lockman::{Config, LockManager};
use redis::aio::ConnectionManager;
use stats::{lockman_once, timed};
use support::certs::TestCerts;
use support::{Options, RedisServer};

const BATCH: u32 = 200;
const BATCHES: usize = 25;

async fn raw_once(conn: &ConnectionManager) {
    raw::pair(conn, "raw", "00000000-0000-4000-8000-000000000000:1").await;
}

fn main() {
    let certs = Arc::new(TestCerts::generate());
    let server = RedisServer::start_with(Options {
        tls: Some(certs.clone()),
        ..Options::default()
    });
    let url = server.url();
    let raw_client = || {
        let mut tls = certs.redis_certificates();
        tls.client_tls = None;
        redis::Client::build_with_tls(url.as_str(), tls).expect("tls client")
    };
    let config = || Config::new(url.clone()).tls_ca_pem(certs.ca_pem.clone());

    let rt = stats::tokio_runtime();
    let raw = rt.block_on(raw::connect_client(raw_client()));
    let tokio_lock = rt.block_on(async {
        LockManager::start(config())
            .await
            .expect("manager over tls")
            .lock("tokio")
    });
    let actix = actix_rt::System::new();
    let raw_actix = actix.block_on(raw::connect_client(raw_client()));
    let actix_mgr = actix
        .block_on(LockManager::start(config()))
        .expect("manager over tls");
    let actix_lock = actix_mgr.lock("actix");

    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    {
        let mut group = c.benchmark_group("uncontended acquire+release over tls");
        group.bench_function("raw evalsha x2", |b| {
            b.iter_custom(|iters| rt.block_on(timed(iters, || raw_once(&raw))))
        });
        group.bench_function("lockman from tokio", |b| {
            b.iter_custom(|iters| rt.block_on(timed(iters, || lockman_once(&tokio_lock))))
        });
        group.bench_function("raw evalsha x2 in actix system", |b| {
            b.iter_custom(|iters| actix.block_on(timed(iters, || raw_once(&raw_actix))))
        });
        group.bench_function("lockman in actix system", |b| {
            b.iter_custom(|iters| actix.block_on(timed(iters, || lockman_once(&actix_lock))))
        });
        group.finish();
    }
    c.final_summary();

    let (mut r, mut t, mut ra, mut a) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..BATCHES {
        r.push(rt.block_on(timed(BATCH.into(), || raw_once(&raw))) / BATCH);
        ra.push(actix.block_on(timed(BATCH.into(), || raw_once(&raw_actix))) / BATCH);
        t.push(rt.block_on(timed(BATCH.into(), || lockman_once(&tokio_lock))) / BATCH);
        a.push(actix.block_on(timed(BATCH.into(), || lockman_once(&actix_lock))) / BATCH);
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (r, t, ra, a) = (
        us(stats::median(r)),
        us(stats::median(t)),
        us(stats::median(ra)),
        us(stats::median(a)),
    );
    println!(
        "\nuncontended acquire+release over TLS, median of {BATCHES} interleaved batches of {BATCH}:"
    );
    println!(
        "  tokio runtime:  raw {r:>7.1} µs   lockman {t:>7.1} µs   ratio {:.2}",
        t / r
    );
    println!(
        "  actix system:   raw {ra:>7.1} µs   lockman {a:>7.1} µs   ratio {:.2}",
        a / ra
    );
    drop(server);
}
