//! The runner's options and the faults it can inject.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
}

impl Fault {
    pub const ALL: [Fault; 8] = [
        Fault::KillHolder,
        Fault::StopHolder,
        Fault::RestartEmpty,
        Fault::RestartAof,
        Fault::ClientKill,
        Fault::StallRedis,
        Fault::RedlockMinority,
        Fault::RedlockMajority,
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
        }
    }
}

/// What `chaos` was asked to do.
pub struct Options {
    pub workers: usize,
    pub duration: Duration,
    /// Stop once this many acquisitions were counted (or when `duration` ran out).
    pub acquisitions: Option<u64>,
    pub faults: Vec<Fault>,
    pub fault_gap: Duration,
    pub redlock: usize,
    pub lease: Duration,
    pub seed: u64,
    pub json: bool,
}

impl Options {
    pub fn parse(argv: &[String]) -> Result<Self, String> {
        let mut o = Options {
            workers: 4,
            duration: Duration::from_secs(30),
            acquisitions: None,
            faults: Fault::ALL.to_vec(),
            fault_gap: Duration::from_millis(1000),
            redlock: 3,
            lease: Duration::from_millis(2000),
            seed: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1),
            json: false,
        };
        let usage = "usage: chaos [--workers N] [--duration SECS] [--acquisitions N] [--faults LIST|none] \
                     [--fault-gap MS] [--redlock 3|5] [--lease MS] [--seed N] [--json]";
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
                "--workers" => o.workers = num(value()?)?.clamp(1, 64) as usize,
                "--duration" => {
                    o.duration = Duration::from_secs(num(value()?)?.clamp(1, 24 * 3600))
                }
                "--acquisitions" => o.acquisitions = Some(num(value()?)?),
                "--fault-gap" => o.fault_gap = Duration::from_millis(num(value()?)?),
                "--redlock" => match num(value()?)? {
                    n @ (3 | 5) => o.redlock = n as usize,
                    n => return Err(format!("--redlock: 3 or 5, not {n}\n{usage}")),
                },
                "--lease" => o.lease = Duration::from_millis(num(value()?)?.clamp(500, 60_000)),
                "--seed" => o.seed = num(value()?)?,
                "--json" => o.json = true,
                "--faults" => {
                    let list = value()?;
                    o.faults = Vec::new();
                    for name in list.split(',').filter(|s| !s.is_empty() && *s != "none") {
                        match Fault::ALL.iter().find(|f| f.name() == name) {
                            Some(f) => o.faults.push(*f),
                            None => return Err(format!("unknown fault {name:?}\n{usage}")),
                        }
                    }
                }
                "-h" | "--help" => return Err(usage.into()),
                other => return Err(format!("unknown option {other}\n{usage}")),
            }
        }
        Ok(o)
    }
}
