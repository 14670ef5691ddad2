//! The chaos runner: several worker processes compete for a few lock names of every kind, and
//! campaign in a few elections, while faults are injected, and every critical section and
//! term is checked on a separate server. It counts acquisitions, exclusion violations (and the
//! fault that explains each), two leaders at once, stale fenced writes, the time without a
//! leader after each fault, lost holds, stuck waiters, free fair locks whose live head was not
//! served (sampled by `heads.rs`) and locks left behind, and exits non-zero
//! on anything that must never happen. RELIABILITY.md has its figures.
//!
//! Run: `cargo run --release --example chaos -- [options]`; `chaos check FILE [LEASE_MS]`
//! checks a history file again (`linear.rs`, docs/histories.md) and prints the verdict.
//!
//! `--help` lists the options ([`options::HELP`]): the deployment (one server, a Sentinel group
//! or a Redis Cluster), replica sync, workers, how long or how many acquisitions and failovers,
//! which faults and how often, RedLock's servers, the lease, the seed, the progress line and
//! JSON output, and the deadlock mode (`--deadlocks random|ordered`, `deadlocks.rs`: cycles of
//! waits formed on purpose, or never, and whether lockman found each and reported no other).
//! The summary goes to stdout; a progress line (elapsed, acquisitions, faults
//! injected and failed, violations so far) goes to stderr every few seconds.
//!
//! Servers: the deployment that holds the locks (a single server has `appendonly yes`,
//! `appendfsync always`, so that it can be restarted with its data or, its files wiped,
//! without), `--redlock` more for RedLock (in a cluster, RedLock's members are three names on
//! its shards), and the checker. All on loopback, in temporary folders, stopped at the end. Workers are this binary
//! again (`chaos worker …`); a worker exits when the runner does (its stdin closes), and the
//! runner kills every process it started on the way out, Ctrl-C included.

// The summary is one `json!` literal, deeper than serde_json's macro may recurse by default.
#![recursion_limit = "256"]

#[path = "../../tests/support/mod.rs"]
mod support;

mod checker;
mod deadlocks;
mod deployment;
mod heads;
mod history;
mod leaders;
mod linear;
mod lost;
mod options;
mod progress;
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
    /// The non-reentrant lock: the holder's second hold is refused (`AlreadyHeld`).
    NonReentrant,
    /// The non-reentrant fair lock: the fair lock's queue, refusing the holder's second hold.
    NonReentrantFair,
    /// The spin lock: the lock's hash, waiters polling on a back-off, releases publishing nothing.
    Spin,
    /// The group multi-lock: two of four members of the hash `chaos:group`, in one script; each
    /// member is checked as a name of its own (`chaos:group:<member>`).
    Group,
}

/// The permits of each chaos semaphore: never more holders inside at once.
pub const SEMAPHORE_PERMITS: u32 = 2;

impl Kind {
    pub const ALL: [Kind; 13] = [
        Kind::Lock,
        Kind::Fair,
        Kind::Read,
        Kind::Write,
        Kind::Fenced,
        Kind::Multi,
        Kind::RedLock,
        Kind::Semaphore,
        Kind::Latch,
        Kind::NonReentrant,
        Kind::NonReentrantFair,
        Kind::Spin,
        Kind::Group,
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
            Kind::NonReentrant => "nonreentrant",
            Kind::NonReentrantFair => "nonreentrant_fair",
            Kind::Spin => "spin",
            Kind::Group => "group",
        }
    }

    /// The fair kinds: their waiters queue in Redis (`heads.rs` samples their names).
    pub fn is_fair(self) -> bool {
        matches!(self, Kind::Fair | Kind::NonReentrantFair)
    }

    /// Where its names live: `chaos:<family>:<i>`.
    pub fn family(self) -> &'static str {
        match self {
            Kind::Read | Kind::Write => "rw",
            Kind::NonReentrant => "nr",
            Kind::NonReentrantFair => "nrfair",
            other => other.name(),
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

/// Concurrent tasks per worker taking locks.
pub const TASKS: u64 = 3;

/// Elections (leader names); every worker runs one more task per election, a candidate.
pub const LEADER_NAMES: u64 = 2;

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
    if argv.first().map(String::as_str) == Some("check") {
        std::process::exit(linear::replay(&argv[1..]));
    }
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
        Ok(Some(options)) => options,
        Ok(None) => {
            print!("{}", options::HELP);
            return;
        }
        Err(usage) => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    std::process::exit(run::main(options));
}
