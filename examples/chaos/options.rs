//! The runner's options and the faults it can inject.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::deadlocks;
use crate::deployment::Shape;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    KillHolder,
    StopHolder,
    RestartEmpty,
    RestartAof,
    ClientKill,
    StallRedis,
    RedlockMinority,
    RedlockMajority,
    FailoverKill,
    FailoverManual,
    PartitionPrimary,
    Reshard,
    CutWorker,
    DropReplies,
    ClockWorker,
    ClockServer,
}

impl Fault {
    pub const ALL: [Fault; 16] = [
        Fault::KillHolder,
        Fault::StopHolder,
        Fault::RestartEmpty,
        Fault::RestartAof,
        Fault::ClientKill,
        Fault::StallRedis,
        Fault::RedlockMinority,
        Fault::RedlockMajority,
        Fault::FailoverKill,
        Fault::FailoverManual,
        Fault::PartitionPrimary,
        Fault::Reshard,
        Fault::CutWorker,
        Fault::DropReplies,
        Fault::ClockWorker,
        Fault::ClockServer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::KillHolder => "kill-holder",
            Fault::StopHolder => "stop-holder",
            Fault::RestartEmpty => "restart-empty",
            Fault::RestartAof => "restart-aof",
            Fault::ClientKill => "client-kill",
            Fault::StallRedis => "stall-redis",
            Fault::RedlockMinority => "redlock-minority",
            Fault::RedlockMajority => "redlock-majority",
            Fault::FailoverKill => "failover-kill",
            Fault::FailoverManual => "failover-manual",
            Fault::PartitionPrimary => "partition-primary",
            Fault::Reshard => "reshard",
            Fault::CutWorker => "cut-worker",
            Fault::DropReplies => "drop-replies",
            Fault::ClockWorker => "clock-worker",
            Fault::ClockServer => "clock-server",
        }
    }

    /// Whether the fault exists in a deployment of this shape. Restarts with and without data
    /// are one server's faults (a replicated deployment's counterpart is the failover);
    /// RedLock's own servers stand beside one server or a Sentinel group, while in a cluster
    /// RedLock's members are names on different shards, which the cluster's faults reach.
    pub fn applies(self, shape: Shape) -> bool {
        match self {
            Fault::KillHolder | Fault::StopHolder | Fault::ClientKill | Fault::StallRedis => true,
            Fault::RestartEmpty | Fault::RestartAof => shape == Shape::Single,
            Fault::RedlockMinority | Fault::RedlockMajority => shape != Shape::Cluster,
            Fault::FailoverKill | Fault::FailoverManual => shape != Shape::Single,
            Fault::PartitionPrimary => shape == Shape::Sentinel,
            Fault::Reshard => shape == Shape::Cluster,
            // A worker's proxy stands before one server; Sentinel and the cluster hand out
            // their servers' own addresses, the same to every worker.
            Fault::CutWorker | Fault::DropReplies => shape == Shape::Single,
            Fault::ClockWorker | Fault::ClockServer => true,
        }
    }

    /// Whether the fault reaches the deployment that holds the locks or the workers (every
    /// fault but those of RedLock's own servers, which no other lock lives on): the faults whose
    /// windows explain a fair lock's live head not served (see `heads.rs`).
    pub fn reaches_locks(self) -> bool {
        !matches!(self, Fault::RedlockMinority | Fault::RedlockMajority)
    }

    /// Whether the fault makes a replica the primary (the failovers whose losses are counted).
    pub fn is_failover(self) -> bool {
        matches!(
            self,
            Fault::FailoverKill | Fault::FailoverManual | Fault::PartitionPrimary
        )
    }
}

/// `chaos --help`.
pub const HELP: &str = "\
chaos: several worker processes compete for a few lock names of every kind, and campaign in
two elections, while faults are injected; every critical section and every term is checked on
a separate server. Prints a summary (a table, or
JSON with --json) on stdout and, every few seconds while it runs, a progress line on stderr.
Exits 0 when nothing that must never happen happened, 1 otherwise, 2 on bad usage.

usage: cargo run --release --example chaos -- [options]

  --deployment D     where the locks live: single (default), sentinel (a primary, two
                     replicas, three sentinels) or cluster (three masters with a replica each)
  --sync-replicas N  each acquire and renewal waits for N replicas (Config::sync_replicas)
  --workers N        worker processes (default 4); each runs 3 tasks and a candidate
                     in each of the 2 elections
  --duration SECS    how long the workers compete (default 30)
  --acquisitions N   stop earlier, once N acquisitions were counted
  --failovers N      with --acquisitions: and once N failovers were injected
  --faults LIST      comma-separated, default every fault of the deployment:
                     kill-holder, stop-holder, client-kill, stall-redis (all deployments);
                     restart-empty, restart-aof (single); redlock-minority, redlock-majority
                     (single, sentinel: RedLock's own servers); failover-kill,
                     failover-manual (sentinel, cluster); partition-primary (sentinel:
                     SIGSTOP the primary past the sentinels' down-after time); reshard
                     (cluster: move a slot holding live locks); cut-worker (single: one
                     worker's connections through its proxy stop both ways for a lease and
                     a second, then flow again), drop-replies (single: its requests reach
                     Redis, the replies are dropped, then its connections close);
                     clock-worker (one worker's wall clock stepped forward, then back, by
                     a lease and a second, libfaketime); clock-server (the lock servers'
                     wall clock stepped forward by a lease and a second, for good: Redis
                     expires keys by it; on a Sentinel group or a cluster, emulated on
                     every primary) (\"none\": no faults)
  --fault-gap MS     pause between two faults (default 1000)
  --each-fault-once SECS
                     when --duration ends before every fault asked for was injected once
                     (a loaded machine can take longer to inject them than planned), go on
                     until it was, for at most SECS more (default 0: stop at --duration)
  --redlock N        RedLock servers, 3 or 5 (default 3)
  --lease MS         watchdog timeout of the workers' locks (default 2000)
  --seed N           the random seed (default: from the clock; printed)
  --deadlocks M      off (default), random or ordered: every worker also runs 2 tasks that
                     take two of 3 locks (chaos:dl:0..2) with acquire(), no timeout, then
                     release both; random: in a random order (cycles of waits form, in one
                     worker and across workers: each must be found, none missed), ordered:
                     in ascending order (no cycle: any LockError::Deadlock is a false report)
  --progress SECS    a progress line on stderr every SECS seconds (default 5; 0: none)
  --history FILE     where the run's history goes: every operation of every worker, one JSON
                     object a line (docs/histories.md), checked at the end by an independent
                     linearizability checker (default: lockman-chaos-SEED.jsonl in the
                     temporary folder)
  --json             print the summary as JSON instead of a table
  -h, --help         print this and exit
";

/// What `chaos` was asked to do.
pub struct Options {
    pub deployment: Shape,
    /// `Config::sync_replicas(n, …)` for the workers' managers; 0: off.
    pub sync_replicas: u32,
    pub workers: usize,
    pub duration: Duration,
    /// Stop once this many acquisitions were counted (or when `duration` ran out).
    pub acquisitions: Option<u64>,
    /// With `acquisitions`: and once this many failovers were injected.
    pub failovers: u64,
    pub faults: Vec<Fault>,
    pub fault_gap: Duration,
    /// How long past `duration` the run may go on until every fault of `faults` was injected
    /// once; zero: it ends at `duration` whatever was injected.
    pub each_fault_once: Duration,
    pub redlock: usize,
    pub lease: Duration,
    pub seed: u64,
    /// How often a progress line goes to stderr; zero: never.
    pub progress: Duration,
    pub json: bool,
    /// Where the run's history is written (`history.rs`).
    pub history: std::path::PathBuf,
    /// The deadlock tasks' mode (`deadlocks.rs`); off: none.
    pub deadlocks: deadlocks::Mode,
}

impl Options {
    /// The options in `argv`, `Ok(None)` when help was asked for, or a message for bad usage.
    pub fn parse(argv: &[String]) -> Result<Option<Self>, String> {
        let mut o = Options {
            deployment: Shape::Single,
            sync_replicas: 0,
            workers: 4,
            duration: Duration::from_secs(30),
            acquisitions: None,
            failovers: 0,
            faults: Vec::new(),
            fault_gap: Duration::from_millis(1000),
            each_fault_once: Duration::ZERO,
            redlock: 3,
            lease: Duration::from_millis(2000),
            seed: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1),
            progress: Duration::from_secs(5),
            json: false,
            history: std::path::PathBuf::new(),
            deadlocks: deadlocks::Mode::Off,
        };
        let usage = "usage: chaos [--deployment single|sentinel|cluster] [--sync-replicas N] [--workers N] [--duration SECS] [--acquisitions N] [--failovers N] [--faults LIST|none] \
                     [--fault-gap MS] [--each-fault-once SECS] [--redlock 3|5] [--lease MS] [--seed N] [--deadlocks off|random|ordered] [--progress SECS] [--history FILE] [--json] (--help: what they mean)";
        let mut faults = None;
        let mut it = argv.iter();
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("{flag} needs a value\n{usage}"))
            };
            let num = |v: String| {
                v.parse::<u64>()
                    .map_err(|_| format!("{flag}: not a number: {v}\n{usage}"))
            };
            match flag.as_str() {
                "--deployment" => {
                    let v = value()?;
                    o.deployment = Shape::parse(&v).ok_or_else(|| {
                        format!("--deployment: single, sentinel or cluster, not {v}\n{usage}")
                    })?;
                }
                "--sync-replicas" => o.sync_replicas = num(value()?)?.min(8) as u32,
                "--workers" => o.workers = num(value()?)?.clamp(1, 64) as usize,
                "--duration" => {
                    o.duration = Duration::from_secs(num(value()?)?.clamp(1, 24 * 3600))
                }
                "--acquisitions" => o.acquisitions = Some(num(value()?)?),
                "--failovers" => o.failovers = num(value()?)?,
                "--fault-gap" => o.fault_gap = Duration::from_millis(num(value()?)?),
                "--each-fault-once" => {
                    o.each_fault_once = Duration::from_secs(num(value()?)?.min(24 * 3600))
                }
                "--redlock" => match num(value()?)? {
                    n @ (3 | 5) => o.redlock = n as usize,
                    n => return Err(format!("--redlock: 3 or 5, not {n}\n{usage}")),
                },
                "--lease" => o.lease = Duration::from_millis(num(value()?)?.clamp(500, 60_000)),
                "--seed" => o.seed = num(value()?)?,
                "--progress" => o.progress = Duration::from_secs(num(value()?)?),
                "--json" => o.json = true,
                "--history" => o.history = value()?.into(),
                "--deadlocks" => {
                    let v = value()?;
                    o.deadlocks = deadlocks::Mode::parse(&v).ok_or_else(|| {
                        format!("--deadlocks: off, random or ordered, not {v}\n{usage}")
                    })?;
                }
                "--faults" => {
                    let list = value()?;
                    let mut chosen = Vec::new();
                    for name in list.split(',').filter(|s| !s.is_empty() && *s != "none") {
                        match Fault::ALL.iter().find(|f| f.name() == name) {
                            Some(f) => chosen.push(*f),
                            None => return Err(format!("unknown fault {name:?}\n{usage}")),
                        }
                    }
                    faults = Some(chosen);
                }
                "-h" | "--help" => return Ok(None),
                other => return Err(format!("unknown option {other}\n{usage}")),
            }
        }
        if o.history.as_os_str().is_empty() {
            o.history = std::env::temp_dir().join(format!("lockman-chaos-{}.jsonl", o.seed));
        }
        let shape = o.deployment;
        o.faults = match faults {
            None => Fault::ALL
                .into_iter()
                .filter(|f| f.applies(shape))
                .collect(),
            Some(chosen) => {
                if let Some(f) = chosen.iter().find(|f| !f.applies(shape)) {
                    return Err(format!(
                        "{} does not apply to a {} deployment\n{usage}",
                        f.name(),
                        shape.name()
                    ));
                }
                chosen
            }
        };
        Ok(Some(o))
    }
}
