//! The judgement of a diagnosis: each [`Check`] from the facts read and the trial, pure (no
//! Redis here; the tests give it facts).

use std::time::Duration;

use super::facts::{Facts, Trial};
use super::{Check, CheckStatus, Diagnosis};
use crate::config::{Config, Deployment};
use crate::error::LockError;
use crate::protocol::keys;

/// A duration as people read it: `850µs`, `12.3ms`, `1.25s`.
fn short(d: Duration) -> String {
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
    let mut checks = vec![match &facts.info_refused {
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
    }];
    checks.push(tls(config));
    checks.push(Check::new(
        "scripting",
        CheckStatus::Ok,
        if trial.done.is_empty() {
            "SCRIPT LOAD and EVALSHA work: every script lockman runs is loaded, and one ran"
        } else {
            "SCRIPT LOAD and EVALSHA work: every script lockman runs is loaded, and the scratch \
             locks ran theirs"
        },
        "",
    ));
    checks.push(match facts.known {
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
    });
    checks.push(sharded_pubsub(facts, trial));
    checks.push(acl(trial, config));
    checks.push(scratch(trial));
    checks
}

fn sharded_pubsub(facts: &Facts, trial: &Trial) -> Check {
    let sharded = facts.cluster && facts.sharded;
    match (&facts.known, sharded) {
        (Ok((true, _)), _) => Check::new(
            "sharded_pubsub",
            CheckStatus::Ok,
            match (facts.cluster, facts.sharded) {
                (true, true) => "SPUBLISH is there; unlock messages are sharded",
                (true, false) => {
                    "SPUBLISH is there; unlock messages are not sharded (as configured)"
                }
                _ => "SPUBLISH is there (used on a cluster only)",
            },
            "",
        ),
        (Ok((false, _)), true) => Check::new(
            "sharded_pubsub",
            CheckStatus::Fail,
            "SPUBLISH is missing, and unlock messages are configured sharded",
            "use Redis 7.0 or later, or Config::sharded_subscription(ShardedSubscription::Off)",
        ),
        (Ok((false, _)), false) => Check::new(
            "sharded_pubsub",
            CheckStatus::Ok,
            "SPUBLISH is missing (Redis before 7.0): not used here",
            "",
        ),
        (Err(refused), true) if trial.refusal.is_none() && !trial.done.is_empty() => Check::new(
            "sharded_pubsub",
            CheckStatus::Ok,
            format!(
                "could not check (COMMAND refused: {refused}); the scratch locks' releases \
                 published with SPUBLISH"
            ),
            "",
        ),
        (Err(refused), true) => Check::new(
            "sharded_pubsub",
            CheckStatus::Warn,
            format!("could not check (COMMAND refused: {refused}); unlock messages are sharded"),
            "let the user run COMMAND INFO (+command|info) for this check",
        ),
        (Err(refused), false) => Check::new(
            "sharded_pubsub",
            CheckStatus::Ok,
            format!("not used here (COMMAND refused, so not checked: {refused})"),
            "",
        ),
    }
}

/// The least-privilege ACL rule that runs every kind of lock and synchronizer on names under
/// `prefix` (all names when it is empty), with replica sync, and every check of the doctor but
/// `CONFIG GET` (docs/protocol.md, "ACL"): the user's key patterns, channel patterns and
/// commands, with no dangerous command.
/// `<user>` and `<password>` stand for the user's name and password.
pub(crate) fn least_privilege_acl(prefix: &str) -> String {
    let names = if prefix.is_empty() {
        "~*".to_owned()
    } else {
        format!("~{prefix}* ~{{{prefix}*")
    };
    format!(
        "ACL SETUSER <user> reset on ><password> {names} ~redisson_lock_queue:* \
         ~redisson_lock_timeout:* ~redisson_lock_token:* ~redisson_lock__channel:* \
         ~redisson_rwlock:* ~redisson_sc:* ~redisson_countdownlatch__channel__* \
         ~redisson_unlock_latch:* ~lockman_fence:* ~lockman_client:* ~lockman_waits:* \
         ~lockman_delay:* &redisson_lock__channel:* &redisson_rwlock:* &redisson_sc:* \
         &redisson_countdownlatch__channel__* \
         +evalsha +script|load +wait +publish +subscribe +unsubscribe +ping +hello +auth \
         +select +client|setname +client|tracking +info +command|info +memory|usage \
         +del +exists +get +set +incr +incrby +decr +decrby +type +time +pttl +pexpire \
         +pexpireat +hget +hset +hdel +hexists +hgetall +hincrby +hkeys +hlen \
         +lindex +lpop +lpos +lrange +lrem +rpush +zadd +zcard +zincrby +zrange \
         +zrangebyscore +zrem +zremrangebyscore +zscore"
    )
}

fn acl(trial: &Trial, config: &Config) -> Check {
    match &trial.refusal {
        Some((step, e @ LockError::NoPermission { .. })) => Check::new(
            "acl",
            CheckStatus::Fail,
            format!(
                "{e} (the scratch {step} {:?}, whose keys and channels are: {})",
                trial.name,
                reached(step, &trial.name).join(", ")
            ),
            format!(
                "give the user what every kind needs (docs/protocol.md, \"ACL\"): {}",
                least_privilege_acl(config.get_name_prefix())
            ),
        ),
        None => Check::new(
            "acl",
            CheckStatus::Ok,
            "the user may load and run the scripts, publish and subscribe on the lock channels, \
             and reach the keys and channels of every kind (the scratch locks)",
            "",
        ),
        Some((step, _)) => Check::new(
            "acl",
            CheckStatus::Ok,
            format!(
                "the user may load and run the scripts, publish and subscribe on the lock \
                 channels; the keys of every kind were not all tried (the scratch {step} failed)"
            ),
            "",
        ),
    }
}

fn scratch(trial: &Trial) -> Check {
    let Some((step, e)) = &trial.refusal else {
        return Check::new(
            "scratch_lock",
            CheckStatus::Ok,
            format!(
                "took and gave back {:?} as: {}",
                trial.name,
                trial.done.join(", ")
            ),
            "",
        );
    };
    let said = match e {
        LockError::Redis { source, .. } => source.to_string(),
        other => other.to_string(),
    };
    let code = match e {
        LockError::Redis { source, .. } => source.code(),
        _ => None,
    };
    let advice = match (e, code) {
        (LockError::NoPermission { .. }, _) => "see acl".to_owned(),
        (LockError::ReplicaSync { .. }, _) => "see replication".to_owned(),
        (_, Some("NOREPLICAS")) => {
            "connect the replicas min-replicas-to-write asks for, or lower it".to_owned()
        }
        (LockError::OutOfMemory { .. }, _) => {
            "the server is at maxmemory: free memory or raise maxmemory".to_owned()
        }
        _ => String::new(),
    };
    let done = if trial.done.is_empty() {
        String::new()
    } else {
        format!(" (after: {})", trial.done.join(", "))
    };
    Check::new(
        "scratch_lock",
        CheckStatus::Fail,
        format!(
            "the scratch {step} {:?} failed: {said}: every {step} here fails so{done}",
            trial.name
        ),
        advice,
    )
}

/// The keys a step of the trial declares to its scripts (each checked against the user's key
/// patterns) and the channels it publishes or subscribes on, so that a refusal names what the
/// user may lack. `<holder>`, `<n>` and `<lane>` stand for the parts that vary.
fn reached(step: &str, name: &str) -> Vec<String> {
    let latch = |name: &str| keys::latch(name, "<lane>");
    let (sem, permits, counted) = (
        format!("{name}:s"),
        format!("{name}:p"),
        format!("{name}:c"),
    );
    match step {
        "lock" | "non-reentrant lock" => vec![name.to_owned(), keys::unlock_channel(name)],
        "fair lock" | "fair lock, waited for" => vec![
            name.to_owned(),
            keys::fair_queue(name),
            keys::fair_deadlines(name),
            keys::unlock_channel(name),
        ],
        "read lock" => vec![
            name.to_owned(),
            format!("{}:<n>", keys::read_timeout_prefix(name, "<holder>")),
            keys::rwlock_channel(name),
        ],
        "write lock" => vec![name.to_owned(), keys::rwlock_channel(name)],
        "fenced lock" => vec![
            name.to_owned(),
            keys::fair_queue(name),
            keys::fair_deadlines(name),
            keys::token_key(name),
        ],
        "semaphore" => vec![sem.clone(), keys::semaphore_channel(&sem), latch(&sem)],
        "permit semaphore" => vec![
            permits.clone(),
            keys::permit_set(&permits),
            keys::semaphore_channel(&permits),
            latch(&permits),
        ],
        "count-down latch" => vec![
            counted.clone(),
            keys::countdown_channel(&counted),
            latch(&counted),
        ],
        _ => vec![
            keys::semaphore_channel(&sem),
            keys::countdown_channel(&counted),
        ],
    }
}

/// Whether the connections are encrypted and verified, from the URLs (the start's handshake
/// verified what they ask for).
fn tls(config: &Config) -> Check {
    let urls: Vec<&str> = match config.deployment() {
        Deployment::Server { url } => vec![url.as_str()],
        Deployment::Sentinel(s) => s.sentinels.iter().map(String::as_str).collect(),
        Deployment::Cluster { nodes, .. } => nodes.iter().map(String::as_str).collect(),
    };
    let secure = |u: &str| u.starts_with("rediss://") || u.starts_with("valkeys://");
    let insecure = urls.iter().any(|u| secure(u) && u.ends_with("#insecure"));
    let all_tls = !urls.is_empty() && urls.iter().all(|u| secure(u));
    let plain_primary = matches!(config.deployment(), Deployment::Sentinel(s) if !s.master_tls());
    if insecure {
        return Check::new(
            "tls",
            CheckStatus::Warn,
            "TLS with certificate and host name checks OFF (#insecure in the URL): anyone on the \
             path can pose as the server and read the password and every lock",
            "drop #insecure and trust the server's certificate (--tls-ca, Config::tls_ca_pem)",
        );
    }
    match (all_tls, plain_primary) {
        (true, true) => Check::new(
            "tls",
            CheckStatus::Warn,
            "the sentinels are reached by TLS, the primary without (master_tls off): its \
             password and every lock travel in clear",
            "Config::master_tls(true)",
        ),
        (true, false) => Check::new(
            "tls",
            CheckStatus::Ok,
            "TLS, the server's certificate and host name verified",
            "",
        ),
        (false, _) => Check::new(
            "tls",
            CheckStatus::Ok,
            "not used (redis://): fine on a trusted network only",
            "",
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

fn eviction(facts: &Facts) -> Check {
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

fn persistence(facts: &Facts) -> Check {
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
fn aof_check(fsync: &str) -> Check {
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

fn replication(facts: &Facts, trial: &Trial, config: &Config) -> Check {
    let info = |k: &str| facts.info.get(k).map(String::as_str);
    let Some(replicas) = info("connected_slaves").and_then(|n| n.parse::<u32>().ok()) else {
        // What WAIT acknowledged after the scratch write is known all the same.
        return match (config.get_sync_replicas(), trial.synced) {
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
        };
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

fn keyspace_events(facts: &Facts) -> Check {
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

#[cfg(test)]
mod tests {
    use super::super::facts::parse_info;
    use super::*;

    fn facts(info: &[(&str, &str)], config: &[(&'static str, &str)]) -> Facts {
        Facts {
            info_refused: None,
            info: info
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            config: config
                .iter()
                .map(|(k, v)| (*k, Ok((*v).to_owned())))
                .collect(),
            known: Ok((true, true)),
            round_trips: vec![Duration::from_micros(300); 5],
            clock_offset_ms: Some(3),
            cluster: false,
            sharded: false,
            label: "redis://127.0.0.1:6379".into(),
        }
    }

    #[test]
    fn info_lines_parse() {
        let info = parse_info("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n\r\n");
        assert_eq!(
            info.get("redis_version").map(String::as_str),
            Some("7.0.15")
        );
        assert_eq!(info.len(), 2);
    }

    /// A writable replica takes the scratch locks like a primary: only its role tells.
    #[test]
    fn a_writable_replica_fails_the_server_check() {
        let config = Config::new("redis://127.0.0.1:6380");
        let trial = Trial::default();
        let primary = facts(&[("role", "master")], &[]);
        assert_eq!(
            started_checks(&primary, &trial, &config)[0].status,
            CheckStatus::Ok
        );
        let replica = facts(
            &[
                ("role", "slave"),
                ("master_host", "10.0.0.5"),
                ("master_port", "6379"),
            ],
            &[],
        );
        let server = &started_checks(&replica, &trial, &config)[0];
        assert_eq!(server.status, CheckStatus::Fail);
        assert!(server.seen.contains("10.0.0.5:6379"), "{}", server.seen);
    }

    #[test]
    fn every_policy_but_noeviction_warns() {
        for (policy, status) in [
            ("noeviction", CheckStatus::Ok),
            ("volatile-lru", CheckStatus::Warn),
            ("allkeys-lfu", CheckStatus::Warn),
            ("volatile-ttl", CheckStatus::Warn),
        ] {
            let f = facts(&[("maxmemory_policy", policy)], &[]);
            assert_eq!(eviction(&f).status, status, "{policy}");
        }
    }

    #[test]
    fn persistence_reads_aof_and_save() {
        let none = facts(&[("aof_enabled", "0")], &[("save", "")]);
        assert_eq!(persistence(&none).status, CheckStatus::Warn);
        assert!(persistence(&none).seen.starts_with("none"));
        let rdb = facts(&[("aof_enabled", "0")], &[("save", "3600 1")]);
        assert!(persistence(&rdb).seen.starts_with("RDB snapshots only"));
        let aof = facts(&[("aof_enabled", "1")], &[("appendfsync", "always")]);
        assert_eq!(persistence(&aof).status, CheckStatus::Ok);
    }

    #[test]
    fn replicas_without_sync_warn_and_too_few_for_sync_fail() {
        let f = facts(&[("connected_slaves", "1")], &[]);
        let none = Trial::default();
        let config = Config::new("redis://127.0.0.1:6379");
        assert_eq!(replication(&f, &none, &config).status, CheckStatus::Warn);
        let synced = config.sync_replicas(2, Duration::from_millis(100));
        assert_eq!(replication(&f, &none, &synced).status, CheckStatus::Fail);
        // What WAIT acknowledged after the scratch write decides, not the replicas connected.
        let mut unsynced = Trial {
            synced: Some(Some((0, 1))),
            ..Trial::default()
        };
        let one = Config::new("redis://x").sync_replicas(1, Duration::from_millis(100));
        assert_eq!(replication(&f, &unsynced, &one).status, CheckStatus::Fail);
        unsynced.synced = Some(None);
        assert_eq!(replication(&f, &unsynced, &one).status, CheckStatus::Ok);
    }

    #[test]
    fn without_info_replica_sync_is_judged_by_what_wait_acknowledged() {
        let mut f = facts(&[], &[]);
        f.info_refused = Some("NOPERM".into());
        let one = Config::new("redis://x").sync_replicas(1, Duration::from_millis(100));
        let unsynced = Trial {
            synced: Some(Some((0, 1))),
            ..Trial::default()
        };
        let c = replication(&f, &unsynced, &one);
        assert_eq!(c.status, CheckStatus::Fail, "{}", c.seen);
        assert!(
            c.seen.contains("0 of 1 replicas acknowledged"),
            "{}",
            c.seen
        );
        let synced = Trial {
            synced: Some(None),
            ..Trial::default()
        };
        assert_eq!(replication(&f, &synced, &one).status, CheckStatus::Ok);
        let plain = Config::new("redis://x");
        assert_eq!(replication(&f, &synced, &plain).status, CheckStatus::Warn);
    }

    #[test]
    fn min_replicas_to_write_above_the_replicas_in_time_fails() {
        let config = Config::new("redis://x");
        let none = Trial::default();
        let alone = facts(
            &[("connected_slaves", "0")],
            &[("min-replicas-to-write", "1")],
        );
        let c = replication(&alone, &none, &config);
        assert_eq!(c.status, CheckStatus::Fail, "{}", c.seen);
        assert!(c.seen.contains("NOREPLICAS"), "{}", c.seen);
        let lagging = facts(
            &[("connected_slaves", "1"), ("min_slaves_good_slaves", "0")],
            &[("min-replicas-to-write", "1")],
        );
        assert_eq!(
            replication(&lagging, &none, &config).status,
            CheckStatus::Fail
        );
        let fine = facts(
            &[("connected_slaves", "1"), ("min_slaves_good_slaves", "1")],
            &[("min-replicas-to-write", "1")],
        );
        assert_eq!(replication(&fine, &none, &config).status, CheckStatus::Warn);
    }

    #[test]
    fn each_appendfsync_is_described_as_the_redis_docs_say() {
        let seen = |fsync: &str| {
            let f = facts(&[("aof_enabled", "1")], &[("appendfsync", fsync)]);
            let c = persistence(&f);
            (c.status, c.seen)
        };
        let (status, always) = seen("always");
        assert_eq!(status, CheckStatus::Ok);
        assert!(always.contains("before it is answered"), "{always}");
        let (status, everysec) = seen("everysec");
        assert_eq!(status, CheckStatus::Ok);
        assert!(everysec.contains("the last second"), "{everysec}");
        let (status, no) = seen("no");
        assert_eq!(status, CheckStatus::Warn);
        assert!(no.contains("typically every 30 s"), "{no}");
        assert!(!no.contains("last second"), "{no}");
    }

    #[test]
    fn command_refused_is_could_not_check_not_missing() {
        let mut f = facts(&[], &[]);
        f.known = Err("NOPERM".into());
        let checks = started_checks(&f, &Trial::default(), &Config::new("redis://x"));
        let lpos = checks.iter().find(|c| c.name == "lpos").expect("lpos");
        assert!(
            lpos.seen.starts_with("could not check (COMMAND refused"),
            "{}",
            lpos.seen
        );
        let sharded = checks
            .iter()
            .find(|c| c.name == "sharded_pubsub")
            .expect("sharded");
        assert!(!sharded.seen.contains("missing"), "{}", sharded.seen);
    }

    #[test]
    fn the_acl_of_the_advice_is_the_one_of_the_docs() {
        let docs = include_str!("../../docs/protocol.md");
        let line = docs
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with("ACL SETUSER <user>"))
            .expect("the ACL line in docs/protocol.md");
        assert_eq!(least_privilege_acl("<prefix>"), line);
    }

    #[test]
    fn insecure_tls_warns() {
        assert_eq!(tls(&Config::new("redis://x")).status, CheckStatus::Ok);
        assert_eq!(tls(&Config::new("rediss://x:6380")).status, CheckStatus::Ok);
        let c = tls(&Config::new("rediss://x:6380/#insecure"));
        assert_eq!(c.status, CheckStatus::Warn);
        assert!(c.seen.contains("OFF"), "{}", c.seen);
    }

    #[test]
    fn clock_offsets_past_a_second_warn() {
        let mut f = facts(&[], &[]);
        f.clock_offset_ms = Some(-1500);
        let c = clock(&f);
        assert_eq!(c.status, CheckStatus::Warn);
        assert!(c.seen.contains("1500ms behind"), "{}", c.seen);
    }

    #[test]
    fn slow_round_trips_warn_then_fail() {
        let config = Config::new("redis://x").response_timeout(Duration::from_secs(1));
        let mut f = facts(&[], &[]);
        assert_eq!(round_trip(&f, &config).status, CheckStatus::Ok);
        f.round_trips[4] = Duration::from_millis(600);
        assert_eq!(round_trip(&f, &config).status, CheckStatus::Warn);
        f.round_trips = vec![Duration::from_millis(1200); 5];
        assert_eq!(round_trip(&f, &config).status, CheckStatus::Fail);
    }
}
