//! What a deployment guarantees, read from the server and judged: the reads (`INFO`,
//! `CONFIG GET`, `COMMAND INFO`, `TIME`, `PING`, `WAIT`) and the [`Diagnosis`] made of them
//! (`LockManager::diagnose`, `lockman doctor`). Nothing here writes a key.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{Cmd, FromRedisValue, Value};

use super::Commands;
use crate::config::Config;
use crate::connections::command::Link;
use crate::connections::failure::connect_error;
use crate::error::LockError;

/// How a [`Check`] came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CheckStatus {
    /// ✔: as lockman needs it.
    Ok,
    /// ⚠: works, but guarantees less than it could (the check's advice says what to change).
    Warn,
    /// ✘: lockman cannot work here, or not as configured.
    Fail,
}

impl CheckStatus {
    /// `✔`, `⚠` or `✘`.
    pub fn symbol(self) -> &'static str {
        match self {
            Self::Ok => "✔",
            Self::Warn => "⚠",
            Self::Fail => "✘",
        }
    }

    /// `ok`, `warn` or `fail` (the JSON of `lockman doctor --json`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "fail",
        }
    }
}

/// One line of a [`Diagnosis`]: what was checked, how it came out, what was seen, and what to
/// do about it (empty when nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Check {
    /// Which check: `server`, `scripting`, `lpos`, `sharded_pubsub`, `acl`, `eviction`,
    /// `persistence`, `replication`, `keyspace_events`, `clock`, `round_trip`.
    pub name: &'static str,
    /// How it came out.
    pub status: CheckStatus,
    /// What was seen, and what it means for locks.
    pub seen: String,
    /// What to do; empty when nothing.
    pub advice: String,
}

impl Check {
    /// A check: for reports that add their own lines (`lockman doctor` when the start failed).
    pub fn new(
        name: &'static str,
        status: CheckStatus,
        seen: impl Into<String>,
        advice: impl Into<String>,
    ) -> Self {
        Self {
            name,
            status,
            seen: seen.into(),
            advice: advice.into(),
        }
    }
}

/// What a deployment guarantees to lockman's locks, one [`Check`] per concern, read from the
/// server a [`LockManager`](crate::LockManager) is connected to
/// ([`LockManager::diagnose`](crate::LockManager::diagnose)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Diagnosis {
    /// The checks, in a fixed order.
    pub checks: Vec<Check>,
}

impl Diagnosis {
    /// A diagnosis of these checks: for reports made of their own lines (`lockman doctor` when
    /// the start failed).
    pub fn new(checks: Vec<Check>) -> Self {
        Self { checks }
    }

    /// The worst status of any check ([`CheckStatus::Ok`] when there are none).
    pub fn worst(&self) -> CheckStatus {
        self.checks
            .iter()
            .map(|c| c.status)
            .max()
            .unwrap_or(CheckStatus::Ok)
    }

    /// The check named `name`, if there is one.
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }
}

/// The server's answers, as read; judged by [`judge`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Facts {
    /// `INFO`'s fields.
    info: HashMap<String, String>,
    /// Why `INFO` could not be read (an ACL without `@dangerous`, a managed server).
    info_refused: Option<String>,
    /// `CONFIG GET` of each setting asked: its value, or why it could not be read.
    config: HashMap<&'static str, Result<String, String>>,
    /// Whether `COMMAND INFO` knows `LPOS` and `SPUBLISH`.
    lpos: bool,
    spublish: bool,
    /// Round trips of `PING`.
    round_trips: Vec<Duration>,
    /// The server's clock minus this machine's, in ms (half a round trip accounted for).
    clock_offset_ms: Option<i64>,
    /// `WAIT` for every connected replica: how many acknowledged, or its error; `None` when not
    /// asked (a cluster).
    wait: Option<Result<i64, String>>,
    /// How long `WAIT` was given.
    wait_limit: Duration,
    /// Whether this is a cluster (the facts are the master of slot 0's).
    cluster: bool,
    /// Whether unlock messages go by sharded pub/sub (`SPUBLISH`).
    sharded: bool,
    /// The deployment, without passwords.
    label: String,
}

/// The settings `CONFIG GET` is asked for, one at a time (Redis 6 takes one per call).
const SETTINGS: [&str; 5] = [
    "maxmemory-policy",
    "save",
    "appendfsync",
    "notify-keyspace-events",
    "min-replicas-to-write",
];

/// How many `PING`s time the round trip.
const PINGS: usize = 5;

/// Where the diagnosis reads: a connection of its own to one server (so that `WAIT` blocks no
/// lock command), or the manager's main connection, which in a cluster sends every command to
/// one node: the master of slot 0, so that every read is of the same server.
enum Target {
    Own(redis::aio::MultiplexedConnection),
    Shared(Link),
}

impl Target {
    async fn ask<T: FromRedisValue>(&mut self, cmd: &Cmd) -> redis::RedisResult<T> {
        match self {
            Self::Own(conn) => cmd.query_async(conn).await,
            Self::Shared(Link::Cluster(cluster)) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                let master = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::new(0, SlotAddr::Master),
                ));
                let reply = cluster.route_command(cmd.clone(), master).await?;
                redis::from_redis_value(reply).map_err(Into::into)
            }
            Self::Shared(Link::Server(conn)) => cmd.query_async(conn).await,
        }
    }
}

impl Commands {
    /// `INFO memory`'s `maxmemory_policy` (in a cluster, the master of slot 0's): for the start-time
    /// eviction check.
    pub(crate) async fn eviction_policy(&self) -> Result<Option<String>, LockError> {
        let mut target = Target::Shared(self.conn().main_link());
        let mut info = redis::cmd("INFO");
        info.arg("memory");
        let reply = self
            .conn()
            .bounded("read the eviction policy", target.ask::<String>(&info))
            .await?
            .map_err(|source| LockError::Redis {
                op: "read the eviction policy",
                source,
            })?;
        Ok(parse_info(&reply).remove("maxmemory_policy"))
    }

    /// Reads everything the diagnosis judges, each read bounded by the response timeout; a read
    /// the server refuses is recorded as such, not failed.
    pub(crate) async fn facts(&self) -> Result<Facts, LockError> {
        let conn = self.conn();
        let endpoint = conn.endpoint();
        let cluster = endpoint.cluster().is_some();
        let mut target = if cluster {
            Target::Shared(conn.main_link())
        } else {
            // Its replies bounded here (`bounded`), not by redis-rs's default, shorter than the
            // WAIT below may take.
            let settings = redis::AsyncConnectionConfig::new().set_response_timeout(None);
            let opened = tokio::time::timeout(
                conn.connect_timeout(),
                endpoint
                    .client()
                    .get_multiplexed_async_connection_with_config(&settings),
            )
            .await;
            match opened {
                Ok(Ok(server)) => Target::Own(server),
                Ok(Err(source)) => return Err(connect_error(endpoint.label(), source)),
                Err(_) => {
                    return Err(LockError::Timeout {
                        op: "connect",
                        after: conn.connect_timeout(),
                    });
                }
            }
        };
        let mut facts = Facts {
            cluster,
            sharded: endpoint.publish_command() == "spublish",
            label: endpoint.label().to_owned(),
            ..Facts::default()
        };
        match conn
            .bounded("read INFO", target.ask::<String>(&redis::cmd("INFO")))
            .await?
        {
            Ok(info) => facts.info = parse_info(&info),
            Err(e) => facts.info_refused = Some(e.to_string()),
        }
        for setting in SETTINGS {
            let mut get = redis::cmd("CONFIG");
            get.arg("GET").arg(setting);
            let read = conn.bounded("CONFIG GET", target.ask::<Vec<String>>(&get));
            let value = match read.await? {
                Ok(pair) => pair
                    .get(1)
                    .cloned()
                    .ok_or_else(|| "no such setting".to_owned()),
                Err(e) => Err(e.to_string()),
            };
            facts.config.insert(setting, value);
        }
        let mut known = redis::cmd("COMMAND");
        known.arg("INFO").arg("LPOS").arg("SPUBLISH");
        let known: Vec<Value> = conn
            .bounded("COMMAND INFO", target.ask(&known))
            .await?
            .unwrap_or_default();
        let present = |i: usize| !matches!(known.get(i), None | Some(Value::Nil));
        (facts.lpos, facts.spublish) = (present(0), present(1));
        let ping = redis::cmd("PING");
        for _ in 0..PINGS {
            let sent = Instant::now();
            let pong = conn.bounded("PING", target.ask::<String>(&ping));
            if pong.await?.is_ok() {
                facts.round_trips.push(sent.elapsed());
            }
        }
        let before = SystemTime::now();
        let sent = Instant::now();
        let time = redis::cmd("TIME");
        let time = conn.bounded("TIME", target.ask::<(u64, u64)>(&time));
        if let Ok((secs, micros)) = time.await? {
            let trip = sent.elapsed();
            let local = before + trip / 2;
            let local_ms = local
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            let server_ms = i64::try_from(secs.saturating_mul(1000).saturating_add(micros / 1000))
                .unwrap_or(i64::MAX);
            facts.clock_offset_ms = Some(server_ms - local_ms);
        }
        if !cluster {
            let replicas: i64 = facts
                .info
                .get("connected_slaves")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            // Short of the response timeout, so that a replica that never acknowledges shows as
            // a count, not as a time-out.
            let limit = (conn.endpoint().response_timeout() / 2).min(Duration::from_millis(500));
            facts.wait_limit = limit;
            let mut wait = redis::cmd("WAIT");
            wait.arg(replicas).arg(super::millis(limit));
            let acked = conn.bounded("WAIT", target.ask::<i64>(&wait)).await?;
            facts.wait = Some(acked.map_err(|e| e.to_string()));
        }
        Ok(facts)
    }
}

/// `INFO`'s `field:value` lines.
fn parse_info(info: &str) -> HashMap<String, String> {
    info.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.trim_end().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

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

/// The checks every started manager passed: its start-time probe loaded and ran the scripts and
/// used the lock channels.
fn started_checks(facts: &Facts) -> Vec<Check> {
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
    checks.push(Check::new(
        "scripting",
        CheckStatus::Ok,
        "SCRIPT LOAD and EVALSHA work: every script lockman runs is loaded",
        "",
    ));
    checks.push(if facts.lpos {
        Check::new("lpos", CheckStatus::Ok, "LPOS is there (fair locks)", "")
    } else {
        Check::new(
            "lpos",
            CheckStatus::Warn,
            "LPOS is missing: every fair-lock acquire fails",
            "fair locks need Redis 6.0.6 or later (or any Valkey)",
        )
    });
    let sharded = facts.sharded;
    checks.push(match (facts.spublish, facts.cluster, sharded) {
        (true, _, _) => Check::new(
            "sharded_pubsub",
            CheckStatus::Ok,
            match (facts.cluster, sharded) {
                (true, true) => "SPUBLISH is there; unlock messages are sharded",
                (true, false) => {
                    "SPUBLISH is there; unlock messages are not sharded (as configured)"
                }
                _ => "SPUBLISH is there (used on a cluster only)",
            },
            "",
        ),
        (false, true, true) => Check::new(
            "sharded_pubsub",
            CheckStatus::Fail,
            "SPUBLISH is missing, and unlock messages are configured sharded",
            "use Redis 7.0 or later, or Config::sharded_subscription(ShardedSubscription::Off)",
        ),
        (false, _, _) => Check::new(
            "sharded_pubsub",
            CheckStatus::Ok,
            "SPUBLISH is missing (Redis before 7.0): not used here",
            "",
        ),
    });
    checks.push(Check::new(
        "acl",
        CheckStatus::Ok,
        "the user may load and run the scripts, publish and subscribe on the lock channels, and reach the keys of a lock",
        "",
    ));
    checks
}

/// Judges the facts for a manager started with `config`.
pub(crate) fn judge(facts: &Facts, config: &Config) -> Diagnosis {
    let mut checks = started_checks(facts);
    checks.push(eviction(facts));
    checks.push(persistence(facts));
    checks.push(replication(facts, config));
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
        (true, _) => Check::new(
            "persistence",
            CheckStatus::Ok,
            format!(
                "AOF on (appendfsync {fsync}): a restart keeps holds and fenced tokens{}",
                if fsync == "always" {
                    ""
                } else {
                    ", but for the last second of writes after a crash"
                }
            ),
            "",
        ),
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

fn replication(facts: &Facts, config: &Config) -> Check {
    let info = |k: &str| facts.info.get(k).map(String::as_str);
    let Some(replicas) = info("connected_slaves").and_then(|n| n.parse::<u32>().ok()) else {
        return Check::new(
            "replication",
            CheckStatus::Warn,
            "replicas unknown: INFO could not be read",
            "without replica sync a failover can lose a lock granted just before it: \
             Config::sync_replicas where replicas run",
        );
    };
    let min = match facts.config.get("min-replicas-to-write") {
        Some(Ok(n)) => n.clone(),
        _ => "?".to_owned(),
    };
    let wait = match &facts.wait {
        Some(Ok(acked)) => format!(
            "; WAIT works ({acked} of {replicas} acknowledged within {})",
            short(facts.wait_limit)
        ),
        Some(Err(e)) => format!("; WAIT failed: {e}"),
        None => String::new(),
    };
    let noun = if replicas == 1 { "replica" } else { "replicas" };
    let seen = format!("{replicas} {noun}, min-replicas-to-write {min}{wait}");
    let wait_refused = matches!(facts.wait, Some(Err(_)));
    match config.get_sync_replicas() {
        Some((count, _)) if wait_refused => Check::new(
            "replication",
            CheckStatus::Fail,
            format!("{seen}: sync_replicas({count}, …) is set, and every acquire would fail"),
            "let the user run WAIT, or drop sync_replicas",
        ),
        Some((count, _)) if !facts.cluster && replicas < count => Check::new(
            "replication",
            CheckStatus::Fail,
            format!("{seen}: sync_replicas({count}, …) asks for more: every acquire fails"),
            format!("connect {count} replicas, or lower sync_replicas"),
        ),
        Some((count, _)) => Check::new(
            "replication",
            CheckStatus::Ok,
            format!("{seen}: sync_replicas({count}, …): a failover keeps every granted lock"),
            "",
        ),
        None if replicas == 0 => Check::new(
            "replication",
            CheckStatus::Ok,
            format!("{seen}: nothing to fail over to"),
            "",
        ),
        None => Check::new(
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
            format!(
                "notify-keyspace-events could not be read ({e}): lockman watch shows releases only"
            ),
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
            lpos: true,
            spublish: true,
            round_trips: vec![Duration::from_micros(300); 5],
            clock_offset_ms: Some(3),
            wait: Some(Ok(0)),
            wait_limit: Duration::from_millis(500),
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
        let config = Config::new("redis://127.0.0.1:6379");
        assert_eq!(replication(&f, &config).status, CheckStatus::Warn);
        let synced = config.sync_replicas(2, Duration::from_millis(100));
        assert_eq!(replication(&f, &synced).status, CheckStatus::Fail);
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
