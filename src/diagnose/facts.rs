//! The reads a diagnosis judges, and its scratch locks and synchronizers: what the server
//! says and does, recorded as it said it (a refusal in its own words); a reply that never came
//! fails the diagnosis.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{Cmd, FromRedisValue, Value};

use crate::connections::command::Link;
use crate::connections::failure::connect_error;
use crate::error::LockError;
use crate::protocol::{
    Attempt, Commands, Expect, FairArgs, Latch, LockKind, Released, SyncKind, SyncLatch, Take,
    check_subscribe, keys,
};

/// The server's answers, as read; judged by [`judge`].
#[derive(Clone, Debug)]
pub(crate) struct Facts {
    /// `INFO`'s fields.
    pub(super) info: HashMap<String, String>,
    /// Why `INFO` could not be read (an ACL without `@dangerous`, a managed server).
    pub(super) info_refused: Option<String>,
    /// `CONFIG GET` of each setting asked: its value, or why it could not be read.
    pub(super) config: HashMap<&'static str, Result<String, String>>,
    /// Whether `COMMAND INFO` knows `LPOS` and `SPUBLISH`, or why it could not be asked.
    pub(super) known: Result<(bool, bool), String>,
    /// Round trips of `PING`.
    pub(super) round_trips: Vec<Duration>,
    /// The server's clock minus this machine's, in ms (half a round trip accounted for).
    pub(super) clock_offset_ms: Option<i64>,
    /// Whether this is a cluster (the facts are the master of slot 0's).
    pub(super) cluster: bool,
    /// Whether unlock messages go by sharded pub/sub (`SPUBLISH`).
    pub(super) sharded: bool,
    /// The deployment, without passwords.
    pub(super) label: String,
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

/// Where the diagnosis reads: a connection of its own to one server, or the manager's main
/// connection, which in a cluster sends every command to one node (`Link::query_one_node`),
/// so that every read is of the same server.
enum Target {
    Own(redis::aio::MultiplexedConnection),
    Shared(Link),
}

impl Target {
    async fn ask<T: FromRedisValue>(&mut self, cmd: &Cmd) -> redis::RedisResult<T> {
        match self {
            Self::Own(conn) => cmd.query_async(conn).await,
            Self::Shared(link) => link.query_one_node(cmd).await,
        }
    }
}

/// A read's outcome as the diagnosis may judge it: the server's answer, or its refusal in its
/// own words (an error reply: `NOPERM`, `ERR unknown command`). A reply that never came (a
/// time-out, a connection that broke or closed) is no answer: it fails the whole diagnosis,
/// so that no check is made of it ("LPOS is missing" from a broken pipe).
fn answered<T>(
    op: &'static str,
    read: Result<redis::RedisResult<T>, LockError>,
) -> Result<Result<T, String>, LockError> {
    match read? {
        Ok(value) => Ok(Ok(value)),
        Err(e) if e.code().is_some() => Ok(Err(e.to_string())),
        Err(source) => Err(LockError::Redis { op, source }),
    }
}

/// Whether an error of a scratch lock is the server's refusal, in its own words (judged in
/// the diagnosis), rather than a reply that never came (which fails the diagnosis).
fn refused(e: &LockError) -> bool {
    match e {
        LockError::NoPermission { .. }
        | LockError::OutOfMemory { .. }
        | LockError::WrongType { .. }
        | LockError::AlreadyHeld { .. }
        | LockError::ReplicaSync { .. }
        | LockError::UnexpectedReply { .. } => true,
        LockError::Redis { source, .. } => source.code().is_some(),
        _ => false,
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
    /// the server refuses is recorded as such, and one whose reply never comes fails it.
    pub(crate) async fn facts(&self) -> Result<Facts, LockError> {
        let conn = self.conn();
        let endpoint = conn.endpoint();
        let cluster = endpoint.cluster().is_some();
        let mut target = if cluster {
            Target::Shared(conn.main_link())
        } else {
            // Its replies bounded here (`bounded`), not by redis-rs's default.
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
            info: HashMap::new(),
            info_refused: None,
            config: HashMap::new(),
            known: Ok((false, false)),
            round_trips: Vec::new(),
            clock_offset_ms: None,
        };
        let info = redis::cmd("INFO");
        let info = conn.bounded("read INFO", target.ask::<String>(&info));
        match answered("read INFO", info.await)? {
            Ok(info) => facts.info = parse_info(&info),
            Err(refused) => facts.info_refused = Some(refused),
        }
        for setting in SETTINGS {
            let mut get = redis::cmd("CONFIG");
            get.arg("GET").arg(setting);
            let read = conn.bounded("CONFIG GET", target.ask::<Vec<String>>(&get));
            let value = answered("CONFIG GET", read.await)?.and_then(|pair| {
                pair.get(1)
                    .cloned()
                    .ok_or_else(|| "no such setting".to_owned())
            });
            facts.config.insert(setting, value);
        }
        let mut known = redis::cmd("COMMAND");
        known.arg("INFO").arg("LPOS").arg("SPUBLISH");
        let known = conn.bounded("COMMAND INFO", target.ask::<Vec<Value>>(&known));
        facts.known = answered("COMMAND INFO", known.await)?.map(|known| {
            let present = |i: usize| !matches!(known.get(i), None | Some(Value::Nil));
            (present(0), present(1))
        });
        self.timings(&mut target, &mut facts).await?;
        Ok(facts)
    }

    /// The round trips of a few PINGs, and the server's clock against ours (by TIME, halfway
    /// through its round trip).
    async fn timings(&self, target: &mut Target, facts: &mut Facts) -> Result<(), LockError> {
        let conn = self.conn();
        let ping = redis::cmd("PING");
        for _ in 0..PINGS {
            let sent = Instant::now();
            let pong = conn.bounded("PING", target.ask::<String>(&ping));
            if answered("PING", pong.await)?.is_ok() {
                facts.round_trips.push(sent.elapsed());
            }
        }
        let before = SystemTime::now();
        let sent = Instant::now();
        let time = redis::cmd("TIME");
        let time = conn.bounded("TIME", target.ask::<(u64, u64)>(&time));
        if let Ok((secs, micros)) = answered("TIME", time.await)? {
            let trip = sent.elapsed();
            let local = before + trip / 2;
            let local_ms = local
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            let server_ms = i64::try_from(secs.saturating_mul(1000).saturating_add(micros / 1000))
                .unwrap_or(i64::MAX);
            facts.clock_offset_ms = Some(server_ms - local_ms);
        }
        Ok(())
    }

    /// Takes and gives back a scratch lock of each kind named `name` (plain, non-reentrant,
    /// fair, read, write), reads its fenced token counter, takes and gives back a permit of a
    /// scratch semaphore and permit semaphore and counts down a scratch latch (`name:s`,
    /// `name:p`, `name:c`), and subscribes once on the synchronizers' channels: through the
    /// scripts and connections every lock and synchronizer uses, with the configured replica
    /// sync (`WAIT` after each acquire). Stops at the first refusal, which it records in the
    /// server's words; a reply that never came fails it. `holders`: one holder id per lock kind;
    /// `lane`: the synchronizers' request-latch lane. Leaves the synchronizers' counters to
    /// expire (within [`SCRATCH_TTL`]) and their request latches (within the latch TTL).
    pub(crate) async fn trial(
        &self,
        name: &str,
        holders: &[String; 5],
        lane: &str,
    ) -> Result<Trial, LockError> {
        let mut trial = Trial {
            name: name.to_owned(),
            ..Trial::default()
        };
        match self.try_locks(name, holders, &mut trial).await {
            Ok(()) => {}
            Err(e) if refused(&e) => return Ok(trial.refuse(e)),
            Err(e) => return Err(e),
        }
        match self.try_synchronizers(name, lane, &mut trial).await {
            Ok(()) => Ok(trial),
            Err(e) if refused(&e) => Ok(trial.refuse(e)),
            Err(e) => Err(e),
        }
    }

    async fn try_locks(
        &self,
        name: &str,
        holders: &[String; 5],
        trial: &mut Trial,
    ) -> Result<(), LockError> {
        let fair = FairArgs {
            wait: SCRATCH_TTL,
            once: true,
            cap: SCRATCH_TTL,
        };
        let kinds = [
            (LockKind::Reentrant, "lock"),
            (LockKind::NonReentrant, "non-reentrant lock"),
            (LockKind::Fair, "fair lock"),
            (LockKind::Read, "read lock"),
            (LockKind::Write, "write lock"),
        ];
        for ((kind, label), holder) in kinds.into_iter().zip(holders) {
            trial.step = label;
            let calls = self.holder(kind, name, holder);
            let attempt = calls.acquire(SCRATCH_TTL, fair, Expect::count(0)).await?;
            let unsynced = match attempt {
                Attempt::Acquired { .. } => None,
                Attempt::Unsynced { acked, wanted } => Some((acked, wanted)),
                other => {
                    return Err(LockError::UnexpectedReply {
                        op: "acquire",
                        detail: format!("a free scratch lock was not taken: {other:?}"),
                    });
                }
            };
            if trial.synced.is_none() {
                trial.synced = Some(unsynced);
            }
            if kind == LockKind::Fair && unsynced.is_none() {
                // A second holder waits, and leaves: the queue's writes (its place, its
                // deadline), which only a contended fair lock runs and a user may lack.
                trial.step = "fair lock, waited for";
                let waiter = &holders[0];
                let queued = FairArgs {
                    wait: SCRATCH_TTL,
                    once: false,
                    cap: SCRATCH_TTL,
                };
                let calls = self.holder(kind, name, waiter);
                match calls.acquire(SCRATCH_TTL, queued, Expect::count(0)).await? {
                    Attempt::Busy { .. } => {}
                    other => {
                        return Err(LockError::UnexpectedReply {
                            op: "acquire",
                            detail: format!("a held scratch fair lock was not busy: {other:?}"),
                        });
                    }
                }
                self.leave_queue(name, waiter, SCRATCH_TTL).await?;
                trial.done.push("fair lock, waited for (queued and left)");
                trial.step = label;
            }
            // Given back even when unsynced: a lock's own grant that too few replicas have is.
            let released = calls.release(SCRATCH_TTL, Expect::count(1)).await?;
            if released != Released::Unlocked {
                return Err(LockError::UnexpectedReply {
                    op: "release",
                    detail: format!("the scratch lock's only hold, given back: {released:?}"),
                });
            }
            if let Some((acked, wanted)) = unsynced {
                return Err(LockError::ReplicaSync { acked, wanted });
            }
            trial.done.push(label);
        }
        trial.step = "fenced lock";
        // Read, not taken: a token counter is kept for good, and the doctor leaves nothing.
        self.describe(name).await?;
        trial.done.push("fenced lock (its token counter read)");
        Ok(())
    }

    async fn try_synchronizers(
        &self,
        name: &str,
        lane: &str,
        trial: &mut Trial,
    ) -> Result<(), LockError> {
        let latch = || SyncLatch {
            lane: lane.to_owned(),
            id: Latch::new().id,
        };
        let id = *uuid::Uuid::new_v4().as_bytes();
        for (kind, label, suffix) in [
            (SyncKind::Semaphore, "semaphore", "s"),
            (SyncKind::PermitSemaphore, "permit semaphore", "p"),
        ] {
            trial.step = label;
            let name = format!("{name}:{suffix}");
            let ids: &[u8] = if kind == SyncKind::PermitSemaphore {
                &id
            } else {
                &[]
            };
            let request = latch();
            let set = self
                .permits(kind, &name, &request)
                .set(1, Some(SCRATCH_TTL));
            if !set.await? {
                return Err(LockError::UnexpectedReply {
                    op: "set permits",
                    detail: "the scratch semaphore existed".to_owned(),
                });
            }
            let request = latch();
            let taken = self
                .permits(kind, &name, &request)
                .take(1, ids, SCRATCH_TTL);
            let unsynced = match taken.await? {
                Take::Taken => None,
                Take::Unsynced { acked, wanted } => Some((acked, wanted)),
                Take::Short { free, .. } => {
                    return Err(LockError::UnexpectedReply {
                        op: "acquire permits",
                        detail: format!(
                            "the scratch semaphore's permit was not taken ({free} free)"
                        ),
                    });
                }
            };
            self.permits(kind, &name, &latch()).give(1, ids).await?;
            if let Some((acked, wanted)) = unsynced {
                return Err(LockError::ReplicaSync { acked, wanted });
            }
            trial.done.push(label);
        }
        trial.step = "count-down latch";
        let counted = format!("{name}:c");
        self.set_count(&counted, 1, &latch()).await?;
        self.count_down(&counted, &latch()).await?;
        trial.done.push("count-down latch");
        trial.step = "synchronizer channels";
        let channels = [
            keys::semaphore_channel(&format!("{name}:s")),
            keys::countdown_channel(&counted),
        ];
        check_subscribe(self.conn(), &channels).await?;
        trial.done.push("their channels subscribed");
        Ok(())
    }
}

/// How long the diagnosis's scratch locks and synchronizers live at most: the lease of each
/// scratch lock (given back at once), the TTL of each scratch semaphore's counter.
pub(crate) const SCRATCH_TTL: Duration = Duration::from_secs(10);

/// What the scratch locks and synchronizers of [`Commands::trial`] met.
#[derive(Debug, Default)]
pub(crate) struct Trial {
    /// The scratch name (with the prefix).
    pub(super) name: String,
    /// What was taken and given back (or read), in order.
    pub(super) done: Vec<&'static str>,
    /// The step under way.
    pub(super) step: &'static str,
    /// With replica sync, of the first acquire: `None` when enough replicas acknowledged it,
    /// else how many did of how many wanted. `None` outside: no acquire was answered.
    pub(super) synced: Option<Option<(u32, u32)>>,
    /// The first step the server refused, and its refusal.
    pub(super) refusal: Option<(&'static str, LockError)>,
}

impl Trial {
    /// The trial, stopped at its step under way by the server's refusal `e`.
    fn refuse(mut self, e: LockError) -> Self {
        self.refusal = Some((self.step, e));
        self
    }
}

/// `INFO`'s `field:value` lines.
pub(super) fn parse_info(info: &str) -> HashMap<String, String> {
    info.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.trim_end().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_that_never_came_fails_and_a_refusal_is_recorded() {
        let broken: redis::RedisError =
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "broken pipe").into();
        assert!(matches!(
            answered::<()>("COMMAND INFO", Ok(Err(broken))),
            Err(LockError::Redis { .. })
        ));
        let timeout = LockError::Timeout {
            op: "INFO",
            after: Duration::from_secs(1),
        };
        assert!(answered::<()>("INFO", Err(timeout)).is_err());
        let noperm = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
            "NOPERM",
            "this user has no permissions to run the 'command|info' command".to_owned(),
        ));
        let refusal = answered::<()>("COMMAND INFO", Ok(Err(noperm))).expect("a refusal");
        assert!(refusal.is_err_and(|said| said.contains("command|info")));
    }
}
