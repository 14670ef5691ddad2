//! What locks need to work on the server: TLS as configured, pub/sub (sharded in a cluster that
//! uses it), the permissions of the user, and the scratch locks that tried it all.

use crate::config::{Config, Deployment};
use crate::diagnose::facts::{Facts, Trial};
use crate::diagnose::{Check, CheckStatus};
use crate::error::LockError;
use crate::protocol::keys;

pub(super) fn sharded_pubsub(facts: &Facts, trial: &Trial) -> Check {
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

pub(super) fn acl(trial: &Trial, config: &Config) -> Check {
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

pub(super) fn scratch(trial: &Trial) -> Check {
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
pub(super) fn reached(step: &str, name: &str) -> Vec<String> {
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
pub(super) fn tls(config: &Config) -> Check {
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
