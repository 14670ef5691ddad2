//! The chaos runner: several worker processes compete for a few lock names of every kind while
//! faults are injected, and every critical section is checked on a separate server. It counts
//! acquisitions, exclusion violations (and the fault that explains each), stale fenced writes,
//! lost holds, stuck waiters and locks left behind, and exits non-zero on anything that must
//! never happen. RELIABILITY.md has its figures.
//!
//! Run: `cargo run --release --example chaos -- [options]`
//!
//! ```text
//! --deployment D     where the locks live: single (default), sentinel (a primary, two
//!                    replicas, three sentinels) or cluster (three masters with a replica each)
//! --sync-replicas N  each acquire and renewal waits for N replicas (Config::sync_replicas)
//! --workers N        worker processes (default 4); each runs 3 tasks
//! --duration SECS    how long the workers compete (default 30)
//! --acquisitions N   stop earlier, once N acquisitions were counted
//! --failovers N      with --acquisitions: and once N failovers were injected
//! --faults LIST      comma-separated, default every fault of the deployment:
//!                    kill-holder, stop-holder, client-kill, stall-redis (all deployments);
//!                    restart-empty, restart-aof (single); redlock-minority, redlock-majority
//!                    (single, sentinel: RedLock's own servers); failover-kill,
//!                    failover-manual (sentinel, cluster); partition-primary (sentinel:
//!                    SIGSTOP the primary past the sentinels' down-after time); reshard
//!                    (cluster: move a slot holding live locks) ("none": no faults)
//! --fault-gap MS     pause between two faults (default 1000)
//! --redlock N        RedLock servers, 3 or 5 (default 3)
//! --lease MS         watchdog timeout of the workers' locks (default 2000)
//! --seed N           the random seed (default: from the clock; printed)
//! --json             print the summary as JSON instead of a table
//! ```
//!
//! Servers: the deployment that holds the locks (a single server has `appendonly yes`,
//! `appendfsync always`, so that it can be restarted with its data or, its files wiped,
//! without), `--redlock` more for RedLock (in a cluster, RedLock's members are three names on
//! its shards), and the checker. All on loopback, in temporary folders, stopped at the end. Workers are this binary
//! again (`chaos worker …`); a worker exits when the runner does (its stdin closes), and the
//! runner kills every process it started on the way out, Ctrl-C included.

#[path = "../../tests/support/mod.rs"]
mod support;

mod checker;
mod deployment;
mod options;
mod report;
mod run;
mod worker;

use std::time::Duration;

/// The lock kinds a worker takes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Lock,
    Fair,
    Read,
    Write,
    Fenced,
    Multi,
    RedLock,
    /// One permit of a permit semaphore of [`SEMAPHORE_PERMITS`].
    Semaphore,
    /// A count-down latch round: set 2, two count-downs, a waiter that must open after both.
    Latch,
}

/// The permits of each chaos semaphore: never more holders inside at once.
pub const SEMAPHORE_PERMITS: u32 = 2;

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Lock,
        Kind::Fair,
        Kind::Read,
        Kind::Write,
        Kind::Fenced,
        Kind::Multi,
        Kind::RedLock,
        Kind::Semaphore,
        Kind::Latch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Fair => "fair",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Fenced => "fenced",
            Kind::Multi => "multi",
            Kind::RedLock => "redlock",
            Kind::Semaphore => "sem",
            Kind::Latch => "latch",
        }
    }

    /// `x` excludes everyone, `r` excludes writers, `w` excludes everyone, `s` admits
    /// [`SEMAPHORE_PERMITS`] at once.
    pub fn mode(self) -> &'static str {
        match self {
            Kind::Read => "r",
            Kind::Write => "w",
            Kind::Semaphore => "s",
            _ => "x",
        }
    }
}

/// Concurrent tasks per worker.
pub const TASKS: u64 = 3;

/// Timings shared by the runner and its workers.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// The watchdog timeout: how long a dead or frozen holder keeps a lock.
    pub lease: Duration,
    /// The workers' response timeout.
    pub response: Duration,
    /// How long a worker waits for a lock before giving up on that attempt.
    pub wait: Duration,
    /// Replicas that must acknowledge each acquire and renewal (`Config::sync_replicas`); 0: off.
    pub sync_replicas: u32,
}

/// xorshift64*: enough randomness for choosing kinds, names and faults, with no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("worker") {
        match worker::Args::parse(&argv) {
            Some(args) => worker::main(args),
            None => {
                eprintln!("chaos worker: bad arguments {argv:?}");
                std::process::exit(2);
            }
        }
        return;
    }
    let options = match options::Options::parse(&argv) {
        Ok(options) => options,
        Err(usage) => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    std::process::exit(run::main(options));
}
