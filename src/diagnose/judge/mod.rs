//! The judgement of a diagnosis: each [`Check`] from the facts read and the trial, pure (no
//! Redis here; the tests give it facts). By family: the server and the link to it (here), what
//! locks need to work there (`access`: TLS, pub/sub, permissions, the scratch locks), and what
//! keeps a lock once granted (`durability`: eviction, persistence, replication, expiry events).

mod access;
mod durability;
#[cfg(test)]
mod tests;

use std::time::Duration;

use super::facts::{Facts, Trial};
use super::{Check, CheckStatus, Diagnosis};
use crate::config::Config;
pub(crate) use access::least_privilege_acl;
use access::{acl, scratch, sharded_pubsub, tls};
use durability::{eviction, keyspace_events, persistence, replication};
pub(crate) use durability::{eviction_risk, evicts_locks};

/// A duration as people read it: `850µs`, `12.3ms`, `1.25s`.
pub(super) fn short(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{}µs", d.as_micros())
    } else if d < Duration::from_secs(1) {
        format!("{:.1}ms", d.as_secs_f64() * 1000.0)
    } else {
        format!("{:.2}s", d.as_secs_f64())
    }
}

/// The checks of what the start-time probe and the scratch locks showed: the server, TLS,
/// scripting, the commands locks need, permissions, and the scratch locks themselves.
fn started_checks(facts: &Facts, trial: &Trial, config: &Config) -> Vec<Check> {
    let scripting = if trial.done.is_empty() {
        "SCRIPT LOAD and EVALSHA work: every script lockman runs is loaded, and one ran"
    } else {
        "SCRIPT LOAD and EVALSHA work: every script lockman runs is loaded, and the scratch \
         locks ran theirs"
    };
    vec![
        server(facts),
        tls(config),
        Check::new("scripting", CheckStatus::Ok, scripting, ""),
        lpos(facts),
        sharded_pubsub(facts, trial),
        acl(trial, config),
        scratch(trial),
    ]
}

/// The server: which, where, and whether locks taken there count (not on a replica).
fn server(facts: &Facts) -> Check {
    let info = |k: &str| facts.info.get(k).map(String::as_str);
    // Valkey answers `redis_version` too (7.2.4, for clients that check it).
    let (server, version) = match info("valkey_version") {
        Some(v) => ("Valkey", v),
        None => ("Redis", info("redis_version").unwrap_or("?")),
    };
    // Valkey says `server_mode`, Redis `redis_mode`.
    let mode = info("server_mode")
        .or_else(|| info("redis_mode"))
        .unwrap_or("standalone");
    let one = if facts.cluster {
        ", the master of slot 0"
    } else {
        ""
    };
    match &facts.info_refused {
        // A writable replica (`replica-read-only no`) takes the scratch locks, but its locks
        // exclude nobody: the primary's clients never see them, and the primary's writes
        // overwrite them.
        None if info("role") == Some("slave") => Check::new(
            "server",
            CheckStatus::Fail,
            format!(
                "{server} {version} at {} is a writable replica of {}:{}: locks taken here \
                 exclude nobody on its primary",
                facts.label,
                info("master_host").unwrap_or("?"),
                info("master_port").unwrap_or("?"),
            ),
            "name the primary in the URL (or use Sentinel); keep replica-read-only yes",
        ),
        None => Check::new(
            "server",
            CheckStatus::Ok,
            format!("{server} {version} ({mode}{one}) at {}", facts.label),
            "",
        ),
        Some(refused) => Check::new(
            "server",
            CheckStatus::Warn,
            format!(
                "INFO refused ({refused}) at {}: server, persistence and replicas unknown",
                facts.label
            ),
            "let the user run INFO (and CONFIG GET) for a full diagnosis",
        ),
    }
}

/// LPOS, which fair locks need.
fn lpos(facts: &Facts) -> Check {
    match facts.known {
        Ok((true, _)) => Check::new("lpos", CheckStatus::Ok, "LPOS is there (fair locks)", ""),
        Ok((false, _)) => Check::new(
            "lpos",
            CheckStatus::Warn,
            "LPOS is missing: every fair-lock acquire that queues fails",
            "fair locks need Redis 6.0.6 or later (or any Valkey)",
        ),
        Err(ref refused) => Check::new(
            "lpos",
            CheckStatus::Warn,
            format!("could not check (COMMAND refused: {refused})"),
            "fair locks need Redis 6.0.6 or later (or any Valkey); let the user run COMMAND INFO \
             (+command|info) for this check",
        ),
    }
}

/// Judges the facts and the trial for a manager started with `config`.
pub(crate) fn judge(facts: &Facts, trial: &Trial, config: &Config) -> Diagnosis {
    let mut checks = started_checks(facts, trial, config);
    checks.push(eviction(facts));
    checks.push(persistence(facts));
    checks.push(replication(facts, trial, config));
    checks.push(keyspace_events(facts));
    checks.push(clock(facts));
    checks.push(round_trip(facts, config));
    Diagnosis { checks }
}

/// The clock offset past which Redisson's fair-lock places go wrong enough to matter: its
/// default thread wait time is 5 s, and a Java client this far off moves its places this much.
const CLOCK_WARN_MS: i64 = 1000;

fn clock(facts: &Facts) -> Check {
    let Some(offset) = facts.clock_offset_ms else {
        return Check::new("clock", CheckStatus::Warn, "TIME could not be read", "");
    };
    let way = if offset >= 0 { "ahead of" } else { "behind" };
    let seen = format!(
        "the server's clock is {}ms {way} this machine's: lockman's scripts use the server's \
         clock only; Redisson's fair lock uses each Java client's",
        offset.unsigned_abs()
    );
    if offset.abs() > CLOCK_WARN_MS {
        Check::new(
            "clock",
            CheckStatus::Warn,
            seen,
            "synchronise clocks (NTP): a Java fair-lock client this far off moves its queue places by as much",
        )
    } else {
        Check::new("clock", CheckStatus::Ok, seen, "")
    }
}

fn round_trip(facts: &Facts, config: &Config) -> Check {
    let response = config.get_response_timeout();
    let mut trips = facts.round_trips.clone();
    trips.sort();
    let (Some(median), Some(slowest)) = (trips.get(trips.len() / 2), trips.last()) else {
        return Check::new("round_trip", CheckStatus::Fail, "PING got no answer", "");
    };
    let seen = format!(
        "{} median, {} slowest of {} PINGs; response timeout {}, watchdog timeout {} (renewed every {})",
        short(*median),
        short(*slowest),
        trips.len(),
        short(response),
        short(config.get_watchdog_timeout()),
        short(config.get_watchdog_timeout() / 3),
    );
    if *median >= response {
        Check::new(
            "round_trip",
            CheckStatus::Fail,
            seen,
            "a round trip takes longer than the response timeout: every command times out; raise Config::response_timeout",
        )
    } else if *slowest * 2 >= response {
        Check::new(
            "round_trip",
            CheckStatus::Warn,
            seen,
            "round trips come within half the response timeout: raise Config::response_timeout, or bring Redis closer",
        )
    } else {
        Check::new("round_trip", CheckStatus::Ok, seen, "")
    }
}
