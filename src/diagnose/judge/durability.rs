//! What keeps a lock once granted: no eviction of its key, persistence across a restart,
//! replicas that have it before a failover, and the expiry events.

use super::short;
use crate::config::Config;
use crate::diagnose::facts::{Facts, Trial};
use crate::diagnose::{Check, CheckStatus};

/// Whether `policy` can evict a lock key (every one has a TTL).
pub(crate) fn evicts_locks(policy: &str) -> bool {
    policy != "noeviction"
}

/// What an eviction policy does to lock keys, for the log and the diagnosis.
pub(crate) fn eviction_risk(policy: &str) -> &'static str {
    if policy.starts_with("volatile") {
        "under memory pressure it evicts keys with a TTL, and every lock key has one: \
         a lock can vanish while held, and a second holder take it"
    } else {
        "under memory pressure it may evict any key, lock keys too: a lock can vanish while \
         held, and a second holder take it"
    }
}

pub(super) fn eviction(facts: &Facts) -> Check {
    let policy = facts
        .info
        .get("maxmemory_policy")
        .cloned()
        .or_else(|| facts.config.get("maxmemory-policy")?.clone().ok());
    let Some(policy) = policy else {
        return Check::new(
            "eviction",
            CheckStatus::Warn,
            "maxmemory-policy could not be read",
            "check that it is noeviction",
        );
    };
    if !evicts_locks(&policy) {
        return Check::new(
            "eviction",
            CheckStatus::Ok,
            "maxmemory-policy noeviction: lock keys are never evicted",
            "",
        );
    }
    let limit = match facts.info.get("maxmemory").map(String::as_str) {
        Some("0") => " (maxmemory 0: no limit is set yet)",
        _ => "",
    };
    Check::new(
        "eviction",
        CheckStatus::Warn,
        format!(
            "maxmemory-policy {policy}{limit}: {}",
            eviction_risk(&policy)
        ),
        "CONFIG SET maxmemory-policy noeviction (or keep locks on a server of their own); \
         Config::refuse_evicting_server(true) refuses to start here",
    )
}

pub(super) fn persistence(facts: &Facts) -> Check {
    let Some(aof) = facts.info.get("aof_enabled").map(|on| on == "1") else {
        return Check::new(
            "persistence",
            CheckStatus::Warn,
            "unknown: INFO could not be read",
            "check that AOF is on (appendonly yes)",
        );
    };
    let save = match facts.config.get("save") {
        Some(Ok(save)) => Some(save.trim().to_owned()),
        _ => None,
    };
    let fsync = match facts.config.get("appendfsync") {
        Some(Ok(fsync)) => fsync.clone(),
        _ => "?".to_owned(),
    };
    match (aof, save.as_deref()) {
        (true, _) => aof_check(&fsync),
        (false, Some("")) => Check::new(
            "persistence",
            CheckStatus::Warn,
            "none (no AOF, no RDB snapshots): a restart empties the server: every held lock is \
             free at once to a second holder (a watchdog hold learns it at its next renewal); \
             fenced tokens go on from the server's clock, a Redisson client's from 1",
            "appendonly yes (appendfsync everysec or always), or run a replica and fail over to it",
        ),
        (false, None) => Check::new(
            "persistence",
            CheckStatus::Warn,
            "no AOF; RDB snapshots unknown (CONFIG GET save refused): a restart loses at least \
             every write since the last snapshot, and every one without snapshots",
            "appendonly yes (appendfsync everysec or always)",
        ),
        (false, save) => Check::new(
            "persistence",
            CheckStatus::Warn,
            format!(
                "RDB snapshots only (save {:?}): a restart loses every write since the last \
                 snapshot: locks taken since are free to a second holder, locks released since \
                 come back held until they expire; fenced tokens go on from the server's clock",
                save.unwrap_or_default()
            ),
            "appendonly yes (appendfsync everysec or always)",
        ),
    }
}

/// AOF on: what a crash can lose, per `appendfsync`, as the Redis documentation states it
/// ("Redis persistence"): a Redis process that dies loses nothing it wrote to the file; a
/// machine that dies (power, kernel) loses what the OS had not flushed yet.
pub(super) fn aof_check(fsync: &str) -> Check {
    let (status, lost, advice) = match fsync {
        "always" => (
            CheckStatus::Ok,
            "every write is flushed to disk before it is answered: a restart keeps holds and \
             fenced tokens, even after the machine crashed",
            "",
        ),
        "everysec" => (
            CheckStatus::Ok,
            "the file is flushed to disk every second: a restart keeps holds and fenced \
             tokens, but a crash of the machine can lose the last second of writes",
            "",
        ),
        "no" => (
            CheckStatus::Warn,
            "Redis never flushes the file; the OS does when it chooses (typically every 30 s \
             on Linux): a crash of the machine can lose that much: locks taken since are free \
             to a second holder, locks released since come back held until they expire",
            "appendfsync everysec (or always)",
        ),
        _ => (
            CheckStatus::Warn,
            "how often the file is flushed to disk is unknown (CONFIG GET appendfsync refused)",
            "check that appendfsync is everysec or always",
        ),
    };
    Check::new(
        "persistence",
        status,
        format!("AOF on (appendfsync {fsync}): {lost}"),
        advice,
    )
}

pub(super) fn replication(facts: &Facts, trial: &Trial, config: &Config) -> Check {
    let info = |k: &str| facts.info.get(k).map(String::as_str);
    let Some(replicas) = info("connected_slaves").and_then(|n| n.parse::<u32>().ok()) else {
        // What WAIT acknowledged after the scratch write is known all the same.
        return replicas_unknown(trial, config);
    };
    let min = match facts.config.get("min-replicas-to-write") {
        Some(Ok(n)) => n.parse::<u32>().ok(),
        _ => None,
    };
    let min_text = min.map_or_else(|| "?".to_owned(), |n| n.to_string());
    let noun = if replicas == 1 { "replica" } else { "replicas" };
    let seen = format!("{replicas} {noun} connected, min-replicas-to-write {min_text}");
    // The replicas that count for min-replicas-to-write: connected, and heard from within
    // min-replicas-max-lag (INFO says so only while the setting is on).
    let good = info("min_slaves_good_slaves")
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(replicas);
    if let Some(min) = min.filter(|&min| min > good) {
        return Check::new(
            "replication",
            CheckStatus::Fail,
            format!(
                "{seen}, {good} of them in time: the server refuses every write (NOREPLICAS), \
                 so every acquire fails"
            ),
            if good == 0 {
                format!("connect {min} replicas, or CONFIG SET min-replicas-to-write 0")
            } else {
                format!("connect {min} replicas, or CONFIG SET min-replicas-to-write {good} (or 0)")
            },
        );
    }
    replica_sync(&seen, replicas, facts, trial, config)
}

/// Replicas unknown (INFO could not be read): what WAIT acknowledged after the scratch write
/// is known all the same.
fn replicas_unknown(trial: &Trial, config: &Config) -> Check {
    match (config.get_sync_replicas(), trial.synced) {
        (Some((count, timeout)), Some(synced)) => {
            let (status, acked) = match synced {
                Some((acked, wanted)) => (
                    CheckStatus::Fail,
                    format!("{acked} of {wanted} replicas acknowledged"),
                ),
                None => (CheckStatus::Ok, format!("{count} or more acknowledged")),
            };
            Check::new(
                "replication",
                status,
                format!(
                    "replicas unknown (INFO could not be read); WAIT after the scratch \
                     lock's acquire: {acked} within {} (sync_replicas({count}, …))",
                    short(timeout)
                ),
                "",
            )
        }
        _ => Check::new(
            "replication",
            CheckStatus::Warn,
            "replicas unknown: INFO could not be read",
            "without replica sync a failover can lose a lock granted just before it: \
             Config::sync_replicas where replicas run",
        ),
    }
}

/// With `replicas` connected (`seen`, in words) and none refusing writes: what replica sync
/// (or its absence) means for a lock across a failover.
fn replica_sync(seen: &str, replicas: u32, facts: &Facts, trial: &Trial, config: &Config) -> Check {
    match (config.get_sync_replicas(), trial.synced) {
        (Some((count, timeout)), Some(Some((acked, wanted)))) => Check::new(
            "replication",
            CheckStatus::Fail,
            format!(
                "{seen}: WAIT after the scratch lock's acquire: {acked} of {wanted} replicas \
                 acknowledged within {}: with sync_replicas({count}, …) every acquire fails \
                 (ReplicaSync)",
                short(timeout)
            ),
            "find the replica that does not acknowledge (frozen, too slow, or not reading its \
             primary), or lower sync_replicas",
        ),
        (Some((count, timeout)), Some(None)) => Check::new(
            "replication",
            CheckStatus::Ok,
            format!(
                "{seen}: WAIT after the scratch lock's acquire: {count} or more acknowledged \
                 within {}: sync_replicas({count}, …) holds, and a failover to one of them \
                 keeps every granted lock",
                short(timeout)
            ),
            "",
        ),
        (Some((count, _)), None) if !facts.cluster && replicas < count => Check::new(
            "replication",
            CheckStatus::Fail,
            format!("{seen}: sync_replicas({count}, …) asks for more: every acquire fails"),
            format!("connect {count} replicas, or lower sync_replicas"),
        ),
        (Some((count, _)), None) => Check::new(
            "replication",
            CheckStatus::Warn,
            format!("{seen}: sync_replicas({count}, …) not tried (the scratch lock was not taken)"),
            "",
        ),
        (None, _) if replicas == 0 => Check::new(
            "replication",
            CheckStatus::Ok,
            format!("{seen}: nothing to fail over to"),
            "",
        ),
        (None, _) => Check::new(
            "replication",
            CheckStatus::Warn,
            format!(
                "{seen}: replication is asynchronous: a failover can lose a lock granted just \
                 before it, and a second holder take it"
            ),
            format!(
                "Config::sync_replicas({}, 250ms), or FencedLock where a stale holder's write \
                 does harm",
                replicas.max(1)
            ),
        ),
    }
}

pub(super) fn keyspace_events(facts: &Facts) -> Check {
    match facts.config.get("notify-keyspace-events") {
        Some(Ok(flags)) => {
            let on = flags.contains('K')
                && (flags.contains('A') || (flags.contains('g') && flags.contains('h')));
            if on {
                Check::new(
                    "keyspace_events",
                    CheckStatus::Ok,
                    format!(
                        "notify-keyspace-events {flags:?}: lockman watch shows acquires, renewals and expiries"
                    ),
                    "",
                )
            } else {
                Check::new(
                    "keyspace_events",
                    CheckStatus::Ok,
                    format!(
                        "notify-keyspace-events {flags:?}: lockman watch shows releases only (locks need none)"
                    ),
                    "CONFIG SET notify-keyspace-events Kghx for acquires, renewals and expiries in lockman watch",
                )
            }
        }
        Some(Err(e)) => Check::new(
            "keyspace_events",
            CheckStatus::Ok,
            format!("notify-keyspace-events could not be read ({e}); locks need none"),
            "",
        ),
        None => Check::new("keyspace_events", CheckStatus::Ok, "not read", ""),
    }
}
