//! The protocol layer: the Lua scripts of `protocol.md`, run by EVALSHA, and their replies decoded
//! into types. No actix here: actors call these, and so do the handles for read-only queries.

mod conn;

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use crate::config::Config;
use crate::connect::Endpoint;
use crate::error::LockError;
use crate::keys::{self, UNLOCK_MESSAGE, WAKE_ALL_MESSAGE};
use conn::Conn;

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("acquire.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("release.lua")));
static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("force_unlock.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("renew.lua")));
static INSPECT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("inspect.lua")));
static FENCED_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("fenced_acquire.lua")));
static READ_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("read_acquire.lua")));
static READ_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("read_release.lua")));
static WRITE_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("write_acquire.lua")));
static WRITE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("write_release.lua")));
static RENEW_READ: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("renew_read.lua")));
// The fair acquire and release scripts both begin by dropping stale queue heads.
static FAIR_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("fair_prune.lua"),
        include_str!("fair_acquire.lua")
    ))
});
static FAIR_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("fair_prune.lua"),
        include_str!("fair_release.lua")
    ))
});
static FAIR_LEAVE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("fair_leave.lua")));
static ACL_PROBE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("acl_probe.lua")));

/// Every script lockman runs: loaded at start, so that a missing permission shows then.
fn all_scripts() -> [&'static Script; 14] {
    [
        &ACQUIRE,
        &RELEASE,
        &FORCE_UNLOCK,
        &RENEW,
        &INSPECT,
        &FENCED_ACQUIRE,
        &READ_ACQUIRE,
        &READ_RELEASE,
        &WRITE_ACQUIRE,
        &WRITE_RELEASE,
        &RENEW_READ,
        &FAIR_ACQUIRE,
        &FAIR_RELEASE,
        &FAIR_LEAVE,
    ]
}

/// One channel of each lock channel family, for the start-time permission check.
fn probe_channels() -> [String; 2] {
    const PROBE: &str = "lockman:acl-check";
    [keys::unlock_channel(PROBE), keys::rwlock_channel(PROBE)]
}

/// What a fair-lock attempt also needs: the waiter's wait (its place in the queue expires that
/// long after its turn) and whether it may enqueue at all.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FairArgs {
    pub wait: Duration,
    pub once: bool,
}

/// The kinds of lock: each has its own scripts, hash field and channel (protocol.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// The reentrant lock.
    Reentrant,
    /// The reentrant lock plus a token counter.
    Fenced,
    /// The read side of a read-write lock.
    Read,
    /// The write side of a read-write lock.
    Write,
    /// The fair lock: a FIFO queue of waiters in Redis.
    Fair,
}

impl LockKind {
    /// The hash field that holds `holder`'s count for this kind.
    pub(crate) fn field(self, holder: &str) -> String {
        match self {
            LockKind::Write => keys::write_field(holder),
            _ => holder.to_owned(),
        }
    }

    /// The channel its releases are published on.
    pub(crate) fn channel(self, name: &str) -> String {
        match self {
            LockKind::Read | LockKind::Write => keys::rwlock_channel(name),
            LockKind::Reentrant | LockKind::Fenced | LockKind::Fair => keys::unlock_channel(name),
        }
    }

    /// The channel on which `holder`'s waiter is woken: the lock's, or for a fair lock the
    /// waiter's own.
    pub(crate) fn waiter_channel(self, name: &str, holder: &str) -> String {
        match self {
            LockKind::Fair => keys::fair_channel(name, holder),
            _ => self.channel(name),
        }
    }

    /// Kinds that share a channel share a lock actor: both sides of a read-write lock.
    pub(crate) fn family(self) -> LockKind {
        match self {
            LockKind::Write => LockKind::Read,
            other => other,
        }
    }
}

/// The most holds one renewal script call carries.
pub(crate) const RENEW_BATCH: usize = 100;

/// The outcome of one acquire attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The holder's count was incremented and the lease set; a fenced lock's token.
    Acquired { token: Option<u64> },
    /// Another holder has it, for `ttl` more (`None`: the key has no expiry).
    Busy { ttl: Option<Duration> },
}

/// The outcome of one release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// The holder had no field: nothing changed.
    NotHeld,
    /// The count went down and is still above zero.
    StillHeld,
    /// The key was deleted and the unlock message published.
    Unlocked,
}

/// A lock's state as seen by one holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Inspection {
    pub locked: bool,
    pub count: u32,
    pub ttl: Option<Duration>,
}

/// The command connections (see `conn.rs`) and the scripts run on them. Cheap to clone: clones
/// share the connections.
#[derive(Clone)]
pub(crate) struct Commands {
    conn: Conn,
}

impl Commands {
    /// Connects to the endpoint's primary and checks the user's permissions, failing within
    /// the config's connect timeout when Redis is unreachable.
    pub(crate) async fn open(endpoint: Endpoint, config: &Config) -> Result<Self, LockError> {
        let conn = Conn::open(endpoint, config).await?;
        conn.check_access(&all_scripts()).await?;
        Ok(Self { conn })
    }

    /// Where the primary is.
    pub(crate) fn endpoint(&self) -> &Endpoint {
        self.conn.endpoint()
    }

    /// After a failover: move every connection to the endpoint's current primary.
    pub(crate) async fn switch_primary(&self) -> Result<(), LockError> {
        self.conn.switch().await
    }

    /// Checks a lock name before anything is sent: not empty, and in a cluster, braces that keep
    /// all of its keys in one slot ([`keys::check_cluster_name`]).
    pub(crate) fn check_name(&self, name: &str) -> Result<(), LockError> {
        keys::validate_name(name)?;
        if self.endpoint().cluster().is_some() {
            keys::check_cluster_name(name)?;
        }
        Ok(())
    }

    /// Whether renewal batches must be split by slot (a script's keys must share one).
    pub(crate) fn by_slot(&self) -> bool {
        self.endpoint().cluster().is_some()
    }

    /// `publish` or `spublish`: see [`Endpoint::publish_command`].
    fn publish(&self) -> &'static str {
        self.conn.endpoint().publish_command()
    }

    async fn run(
        &self,
        op: &'static str,
        key: &str,
        invocation: redis::ScriptInvocation<'_>,
    ) -> Result<Value, LockError> {
        self.conn.run(op, key, invocation).await
    }

    /// One acquire attempt of `kind` (`acquire.lua`, `fenced_acquire.lua`, `read_acquire.lua`,
    /// `write_acquire.lua`).
    pub(crate) async fn acquire(
        &self,
        kind: LockKind,
        name: &str,
        holder: &str,
        lease: Duration,
        fair: FairArgs,
    ) -> Result<Attempt, LockError> {
        let key = keys::lock_key(name);
        let lease = millis(lease);
        let script: &Script = match kind {
            LockKind::Reentrant => &ACQUIRE,
            LockKind::Fenced => &FENCED_ACQUIRE,
            LockKind::Read => &READ_ACQUIRE,
            LockKind::Write => &WRITE_ACQUIRE,
            LockKind::Fair => &FAIR_ACQUIRE,
        };
        let call = match kind {
            LockKind::Reentrant => {
                let mut call = ACQUIRE.key(key);
                call.arg(lease).arg(holder);
                call
            }
            LockKind::Fenced => {
                let mut call = FENCED_ACQUIRE.key(key);
                call.key(keys::token_key(name)).arg(lease).arg(holder);
                call
            }
            LockKind::Read => {
                let mut call = READ_ACQUIRE.key(key);
                call.key(keys::read_timeout_prefix(name, holder))
                    .arg(lease)
                    .arg(holder)
                    .arg(keys::write_field(holder));
                call
            }
            LockKind::Write => {
                let mut call = WRITE_ACQUIRE.key(key);
                call.arg(lease).arg(keys::write_field(holder));
                call
            }
            LockKind::Fair => {
                let mut call = FAIR_ACQUIRE.key(key);
                call.key(keys::fair_queue(name))
                    .key(keys::fair_deadlines(name))
                    .arg(lease)
                    .arg(holder)
                    .arg(millis(fair.wait))
                    .arg(epoch_millis())
                    .arg(if fair.once { "1" } else { "0" });
                call
            }
        };
        let (reply, acked) = self.conn.run_synced("acquire", key, script, call).await?;
        let attempt = decode_attempt(reply)?;
        if let (Attempt::Acquired { .. }, Some(acked), Some(wanted)) =
            (attempt, acked, self.conn.sync_wanted())
            && acked < wanted
        {
            // Not on enough replicas to survive a failover: give it back.
            self.release(kind, name, holder, Duration::from_millis(lease))
                .await?;
            return Err(LockError::ReplicaSync { acked, wanted });
        }
        Ok(attempt)
    }

    /// Releases one hold of `kind`, restoring `lease` when holds remain.
    pub(crate) async fn release(
        &self,
        kind: LockKind,
        name: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<Released, LockError> {
        let key = keys::lock_key(name);
        let call = match kind {
            LockKind::Reentrant | LockKind::Fenced => {
                let mut call = RELEASE.key(key);
                call.key(keys::unlock_channel(name))
                    .arg(UNLOCK_MESSAGE)
                    .arg(millis(lease))
                    .arg(holder)
                    .arg(self.publish());
                call
            }
            LockKind::Read => {
                let mut call = READ_RELEASE.key(key);
                call.key(keys::rwlock_channel(name))
                    .key(keys::read_timeout_prefix(name, holder))
                    .key(keys::tagged(name))
                    .arg(UNLOCK_MESSAGE)
                    .arg(holder)
                    .arg(self.publish());
                call
            }
            LockKind::Write => {
                let mut call = WRITE_RELEASE.key(key);
                call.key(keys::rwlock_channel(name))
                    .arg(WAKE_ALL_MESSAGE)
                    .arg(millis(lease))
                    .arg(keys::write_field(holder))
                    .arg(self.publish());
                call
            }
            LockKind::Fair => {
                let mut call = FAIR_RELEASE.key(key);
                call.key(keys::fair_queue(name))
                    .key(keys::fair_deadlines(name))
                    .key(keys::unlock_channel(name))
                    .arg(UNLOCK_MESSAGE)
                    .arg(millis(lease))
                    .arg(holder)
                    .arg(epoch_millis())
                    .arg(self.publish());
                call
            }
        };
        match self.run("release", key, call).await? {
            Value::Nil => Ok(Released::NotHeld),
            Value::Int(0) => Ok(Released::StillHeld),
            Value::Int(1) => Ok(Released::Unlocked),
            other => Err(unexpected("release", other)),
        }
    }

    /// A fair-lock waiter gives up: it leaves the queue, and those behind it get `wait` back.
    pub(crate) async fn leave_queue(
        &self,
        name: &str,
        holder: &str,
        wait: Duration,
    ) -> Result<bool, LockError> {
        let key = keys::lock_key(name);
        let mut call = FAIR_LEAVE.key(key);
        call.key(keys::fair_queue(name))
            .key(keys::fair_deadlines(name))
            .key(keys::unlock_channel(name))
            .arg(holder)
            .arg(millis(wait))
            .arg(UNLOCK_MESSAGE)
            .arg(self.publish());
        match self.run("leave queue", key, call).await? {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected("leave queue", other)),
        }
    }

    /// Deletes the lock whoever holds it (`force_unlock.lua`); true when there was one.
    pub(crate) async fn force_unlock(&self, kind: LockKind, name: &str) -> Result<bool, LockError> {
        let key = keys::lock_key(name);
        let mut call = FORCE_UNLOCK.key(key);
        let message = match kind {
            LockKind::Read | LockKind::Write => WAKE_ALL_MESSAGE,
            LockKind::Reentrant | LockKind::Fenced | LockKind::Fair => UNLOCK_MESSAGE,
        };
        call.key(kind.channel(name))
            .arg(message)
            .arg(self.publish());
        match self.run("force unlock", key, call).await? {
            Value::Int(n) => Ok(n == 1),
            other => Err(unexpected("force unlock", other)),
        }
    }

    /// Reads the lock's state for `holder` (`inspect.lua`), changing nothing.
    pub(crate) async fn inspect(
        &self,
        kind: LockKind,
        name: &str,
        holder: &str,
    ) -> Result<Inspection, LockError> {
        let key = keys::lock_key(name);
        let mut call = INSPECT.key(key);
        call.arg(kind.field(holder));
        match self.run("inspect", key, call).await? {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(exists), Value::Int(count), Value::Int(ttl)] => Ok(Inspection {
                    locked: *exists == 1,
                    count: u32::try_from(*count).unwrap_or(0),
                    ttl: if *exists == 1 { ttl_of(*ttl) } else { None },
                }),
                _ => Err(unexpected("inspect", Value::Array(items))),
            },
            other => Err(unexpected("inspect", other)),
        }
    }

    /// Renews up to [`RENEW_BATCH`] holds of one kind (`renew.lua`; `renew_read.lua` for read
    /// holds, which also renews the timeout keys): `true` for each hold still in place.
    pub(crate) async fn renew(
        &self,
        kind: LockKind,
        holds: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<Vec<bool>, LockError> {
        let mut call = match kind {
            LockKind::Read => RENEW_READ.prepare_invoke(),
            _ => RENEW.prepare_invoke(),
        };
        call.arg(millis(timeout));
        for (name, holder) in holds {
            call.key(keys::lock_key(name)).arg(kind.field(holder));
            if kind == LockKind::Read {
                call.arg(keys::tagged(name));
            }
        }
        let script: &Script = if kind == LockKind::Read {
            &RENEW_READ
        } else {
            &RENEW
        };
        let (reply, acked) = self.conn.run_synced("renew", "", script, call).await?;
        if let (Some(acked), Some(wanted)) = (acked, self.conn.sync_wanted())
            && acked < wanted
        {
            return Err(LockError::ReplicaSync { acked, wanted });
        }
        match reply {
            Value::Array(items) if items.len() == holds.len() => {
                Ok(items.iter().map(|v| matches!(v, Value::Int(1))).collect())
            }
            other => Err(unexpected("renew", other)),
        }
    }
}

/// An acquire script's reply: nil (acquired), `[token]` (a fenced lock acquired), or the PTTL.
fn decode_attempt(reply: Value) -> Result<Attempt, LockError> {
    match reply {
        Value::Nil => Ok(Attempt::Acquired { token: None }),
        Value::Array(token) => match token.as_slice() {
            [Value::Int(t)] => Ok(Attempt::Acquired {
                token: u64::try_from(*t).ok(),
            }),
            _ => Err(unexpected("acquire", Value::Array(token))),
        },
        Value::Int(ttl) => Ok(Attempt::Busy { ttl: ttl_of(ttl) }),
        other => Err(unexpected("acquire", other)),
    }
}

/// Now, as epoch milliseconds on this client's clock (fair-lock deadlines).
fn epoch_millis() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A duration as whole milliseconds, at least 1 (PEXPIRE 0 would delete the key).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// A PTTL reply: `None` for "no expiry" (-1); a missing key (-2) counts as already expired.
fn ttl_of(ms: i64) -> Option<Duration> {
    match ms {
        -1 => None,
        ms => Some(Duration::from_millis(ms.max(0).unsigned_abs())),
    }
}

fn unexpected(op: &'static str, reply: Value) -> LockError {
    LockError::UnexpectedReply {
        op,
        detail: format!("{reply:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_replies_decode() {
        assert_eq!(ttl_of(-1), None);
        assert_eq!(ttl_of(-2), Some(Duration::ZERO));
        assert_eq!(ttl_of(1500), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn millis_never_rounds_to_zero() {
        assert_eq!(millis(Duration::from_micros(10)), 1);
        assert_eq!(millis(Duration::from_secs(30)), 30_000);
    }
}
