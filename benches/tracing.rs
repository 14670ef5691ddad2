//! What lockman's spans cost: an uncontended acquire+release inside an actix System with no
//! subscriber, with a subscriber whose filter leaves lockman's DEBUG spans off (the usual
//! production setting), and with one that records them (a registry keeping every span). Medians
//! of interleaved batches, in one run, against one throwaway redis-server.
//!
//! Run: `cargo bench --bench tracing`.

mod common {
    #[path = "../common/stats.rs"]
    pub mod stats;
}
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use common::stats::{self, lockman_once, timed};
use lockman::LockManager;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;

const BATCH: u64 = 200;
const BATCHES: usize = 21;

fn main() {
    let server = support::RedisServer::start();
    let actix = actix_rt::System::new();
    let mgr = actix
        .block_on(LockManager::connect(&server.url()))
        .expect("manager");
    let lock = mgr.lock("traced");
    let filtered = || tracing_subscriber::registry().with(EnvFilter::new("info"));
    let recording = || tracing_subscriber::registry().with(EnvFilter::new("lockman=debug"));
    let (mut none, mut off, mut on) = (Vec::new(), Vec::new(), Vec::new());
    let once = || timed(BATCH, || lockman_once(&lock));
    actix.block_on(timed(BATCH, || lockman_once(&lock))); // warm-up
    for _ in 0..BATCHES {
        none.push(actix.block_on(once()) / BATCH as u32);
        off.push(
            tracing::subscriber::with_default(filtered(), || actix.block_on(once())) / BATCH as u32,
        );
        on.push(
            tracing::subscriber::with_default(recording(), || actix.block_on(once()))
                / BATCH as u32,
        );
    }
    let us = |v: Vec<Duration>| stats::median(v).as_secs_f64() * 1e6;
    let (none, off, on) = (us(none), us(off), us(on));
    println!(
        "\nuncontended acquire+release in an actix System, median of {BATCHES} interleaved batches of {BATCH}:"
    );
    println!("  no subscriber                          {none:>7.1} µs");
    println!(
        "  a subscriber, lockman's spans filtered {off:>7.1} µs   ratio {:.3}",
        off / none
    );
    println!(
        "  a subscriber recording lockman's spans {on:>7.1} µs   ratio {:.3}",
        on / none
    );
    actix.block_on(mgr.shutdown());
}
