//! Uncontended acquire + release, one task, one name: lockman beside a raw redis-rs loop running
//! the same two scripts by EVALSHA on the same kind of connection (`ConnectionManager`), and
//! beside the design's floor (a trivial actor per name running those scripts,
//! `benches/common/floor.rs`), against the same throwaway redis-server, in the same run.
//!
//! lockman is measured three ways: called from plain tokio, current-thread and multi-thread
//! (its actors then run on a System of its own, on another thread), and from inside an actix
//! System (actors on the caller's thread). Each is compared with the raw loop and the floor on
//! the same kind of runtime: the runtimes differ by several percent on their own.
//! Criterion reports each; the closing table gives medians of interleaved batches and ratios
//! (`benches/common/compare.rs`).
//!
//! Run: `cargo bench --bench uncontended` (starts its own redis-server).

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

fn main() {
    let server = support::RedisServer::start();
    let url = server.url();
    common::compare::uncontended(
        "uncontended acquire+release",
        || redis::Client::open(url.as_str()).expect("valid url"),
        || lockman::Config::new(url.clone()),
    );
    drop(server);
}
