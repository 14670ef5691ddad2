//! The synchronizers' scripts (`sync/*.lua`): semaphores, permit semaphores and count-down
//! latches, wire-compatible with Redisson's RSemaphore, RPermitExpirableSemaphore and
//! RCountDownLatch (docs/protocol.md). Every script that changes something runs behind a
//! [`SyncLatch`], so that a request whose reply never came is sent again safely.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use super::commands::Commands;
use super::{millis, unexpected};
use crate::connections::command::{Replicas, ScriptCall, Unsynced};
use crate::error::LockError;
use crate::protocol::keys;

/// A synchronizer script: its parts joined into `local function body()`, followed by
/// `sync/latch.lua`.
macro_rules! sync_latched {
    ($($part:literal),+) => {
        LazyLock::new(|| {
            Script::new(concat!(
                "local function body()\n",
                include_str!("sync/counter.lua"),
                $(include_str!($part),)+
                "end\n",
                include_str!("sync/latch.lua")
            ))
        })
    };
}

/// A synchronizer script without a latch (it changes nothing a resend could count twice).
macro_rules! sync_plain {
    ($($part:literal),+) => {
        LazyLock::new(|| Script::new(concat!(include_str!("sync/counter.lua"), $(include_str!($part),)+)))
    };
}

static SEMAPHORE_ACQUIRE: LazyLock<Script> = sync_latched!("sync/semaphore_acquire.lua");
static SEMAPHORE_RELEASE: LazyLock<Script> = sync_latched!("sync/semaphore_release.lua");
static SEMAPHORE_SET: LazyLock<Script> = sync_latched!("sync/semaphore_set.lua");
static SEMAPHORE_ADD: LazyLock<Script> = sync_latched!("sync/semaphore_add.lua");
static SEMAPHORE_DRAIN: LazyLock<Script> = sync_latched!("sync/semaphore_drain.lua");
static SEMAPHORE_RELEASE_IF_EXISTS: LazyLock<Script> =
    sync_latched!("sync/semaphore_release_if_exists.lua");
static PERMIT_ACQUIRE: LazyLock<Script> =
    sync_latched!("sync/permit_reclaim.lua", "sync/permit_acquire.lua");
static PERMIT_RELEASE: LazyLock<Script> =
    sync_latched!("sync/permit_reclaim.lua", "sync/permit_release.lua");
static PERMIT_RELEASE_ALL: LazyLock<Script> =
    sync_latched!("sync/permit_reclaim.lua", "sync/permit_release_all.lua");
static PERMIT_AVAILABLE: LazyLock<Script> =
    sync_plain!("sync/permit_reclaim.lua", "sync/permit_available.lua");
// Reclaims, but a resend reclaims only what expired by then: no latch needed.
static PERMIT_LEASE_TIME: LazyLock<Script> =
    sync_plain!("sync/permit_reclaim.lua", "sync/permit_lease_time.lua");
static PERMIT_RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("sync/permit_renew.lua")));
static LATCH_SET: LazyLock<Script> = sync_latched!("sync/latch_set.lua");
static LATCH_COUNT_DOWN: LazyLock<Script> = sync_latched!("sync/latch_count_down.lua");
static COUNTER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("sync/counter.lua"),
        "return {counter(KEYS[1]) or 0}\n"
    ))
});
static DESCRIBE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("sync/describe.lua")));

/// Every synchronizer script, loaded at start with the locks' (see `all_scripts`).
pub(super) fn sync_scripts() -> [&'static Script; 16] {
    [
        &SEMAPHORE_ACQUIRE,
        &SEMAPHORE_RELEASE_IF_EXISTS,
        &PERMIT_RELEASE_ALL,
        &PERMIT_LEASE_TIME,
        &SEMAPHORE_RELEASE,
        &SEMAPHORE_SET,
        &SEMAPHORE_ADD,
        &SEMAPHORE_DRAIN,
        &PERMIT_ACQUIRE,
        &PERMIT_RELEASE,
        &PERMIT_AVAILABLE,
        &PERMIT_RENEW,
        &LATCH_SET,
        &LATCH_COUNT_DOWN,
        &COUNTER,
        &DESCRIBE,
    ]
}

/// The kinds of synchronizer, each wire-compatible with a Redisson class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SyncKind {
    /// A counting semaphore (RSemaphore): the key holds the free permits.
    Semaphore,
    /// A semaphore whose permits have ids and leases (RPermitExpirableSemaphore).
    PermitSemaphore,
    /// A count-down latch (RCountDownLatch).
    CountDownLatch,
}

impl SyncKind {
    /// The channel its changes are published on.
    pub(crate) fn channel(self, name: &str) -> String {
        match self {
            SyncKind::Semaphore | SyncKind::PermitSemaphore => keys::semaphore_channel(name),
            SyncKind::CountDownLatch => keys::countdown_channel(name),
        }
    }

    /// One letter for keys that tell the kinds apart.
    pub(crate) fn letter(self) -> char {
        match self {
            SyncKind::Semaphore => 's',
            SyncKind::PermitSemaphore => 'p',
            SyncKind::CountDownLatch => 'c',
        }
    }

    /// A label for logs, metrics and errors.
    pub(crate) fn label(self) -> &'static str {
        match self {
            SyncKind::Semaphore => "semaphore",
            SyncKind::PermitSemaphore => "permit_semaphore",
            SyncKind::CountDownLatch => "count_down_latch",
        }
    }
}

/// What makes one synchronizer request idempotent (`sync/latch.lua`): the latch key of one
/// lane of one actor, and this request's number. A lane carries one request at a time, so the
/// keys an actor leaves are as many as its most concurrent requests, and they expire.
#[derive(Clone, Debug)]
pub(crate) struct SyncLatch {
    /// `<actor uuid>:<lane>`: unique across processes.
    pub lane: String,
    pub id: u64,
}

/// The outcome of one attempt to take permits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Take {
    /// Taken.
    Taken,
    /// Taken, but fewer replicas than `Config::sync_replicas` asks for acknowledged it.
    Unsynced { acked: u32, wanted: u32 },
    /// Not enough free permits: how many were free; for a permit semaphore, when the permit
    /// held longest expires (`None`: no lease, or none held).
    Short {
        free: i64,
        retry_in: Option<Duration>,
    },
}

/// What describe read of one synchronizer.
#[derive(Clone, Debug, Default)]
pub(crate) struct SyncDescribed {
    /// The Redis type of the main key (`none` when missing).
    pub key_type: String,
    pub value: Option<String>,
    pub ttl: Option<Duration>,
    /// Held permits: (id as 32 hex characters, expiry score in epoch ms).
    pub held: Vec<(String, i64)>,
    /// The server's clock, epoch ms.
    pub now: i64,
}

/// Redisson's score for a permit without a lease.
pub(crate) const NO_LEASE_SCORE: i64 = 922_337_203_685_477;

impl Commands {
    /// Runs a call made by [`latched`] behind `latch` (the request's id and PTTL appended to
    /// its arguments), and decodes its array of integers.
    async fn run_latched(
        &self,
        op: &'static str,
        mut call: ScriptCall<'_>,
        name: &str,
        latch: &SyncLatch,
        replicas: Replicas,
    ) -> Result<(Vec<i64>, Option<Unsynced>), LockError> {
        call.arg(latch.id).arg(self.latch_ttl_ms());
        let reply = self.conn().eval(op, name, &call, replicas).await?;
        Ok((ints(op, reply.value)?, reply.unsynced))
    }

    /// Runs a call that changes nothing and decodes its array of integers.
    async fn run_plain(
        &self,
        op: &'static str,
        call: &ScriptCall<'_>,
        name: &str,
    ) -> Result<Vec<i64>, LockError> {
        let reply = self.conn().eval(op, name, call, Replicas::Skip).await?;
        ints(op, reply.value)
    }

    /// The requests on the semaphore `name` of `kind` that run behind `latch`.
    pub(crate) fn permits<'a>(
        &'a self,
        kind: SyncKind,
        name: &'a str,
        latch: &'a SyncLatch,
    ) -> PermitCalls<'a> {
        PermitCalls {
            commands: self,
            kind,
            name,
            latch,
        }
    }

    /// Adds `delta` permits (negative: removes): the new free count.
    pub(crate) async fn add_permits(
        &self,
        kind: SyncKind,
        name: &str,
        delta: i64,
        latch: &SyncLatch,
    ) -> Result<i64, LockError> {
        let channel = kind.channel(name);
        let mut call = latched(&SEMAPHORE_ADD, &[name, &channel], 3, 0, latch);
        let flavour = if kind == SyncKind::PermitSemaphore {
            "p"
        } else {
            "s"
        };
        call.arg(delta).arg(self.publish_command()).arg(flavour);
        let (reply, _) = self
            .run_latched("add permits", call, name, latch, Replicas::Skip)
            .await?;
        first("add permits", &reply)
    }

    /// Gives `permits` back to a semaphore only when its key exists
    /// (`semaphore_release_if_exists.lua`): whether it did.
    pub(crate) async fn release_if_exists(
        &self,
        name: &str,
        permits: u32,
        latch: &SyncLatch,
    ) -> Result<bool, LockError> {
        let channel = keys::semaphore_channel(name);
        let mut call = latched(&SEMAPHORE_RELEASE_IF_EXISTS, &[name, &channel], 2, 0, latch);
        call.arg(permits).arg(self.publish_command());
        let (reply, _) = self
            .run_latched("release if exists", call, name, latch, Replicas::Skip)
            .await?;
        Ok(first("release if exists", &reply)? == 1)
    }

    /// Gives back the permits `ids` (16 bytes each) of a permit semaphore all at once, or none
    /// of them when one is not held (`permit_release_all.lua`): how many were given back.
    pub(crate) async fn release_all_permits(
        &self,
        name: &str,
        ids: &[u8],
        latch: &SyncLatch,
    ) -> Result<i64, LockError> {
        let (set, channel) = (keys::permit_set(name), keys::semaphore_channel(name));
        let keys = [name, &set, &channel];
        let mut call = latched(&PERMIT_RELEASE_ALL, &keys, 2, ids.len(), latch);
        call.arg(self.publish_command()).arg(ids);
        let (reply, _) = self
            .run_latched("release permits", call, name, latch, Replicas::Skip)
            .await?;
        first("release permits", &reply)
    }

    /// A permit's time left (`permit_lease_time.lua`), after reclaiming expired permits:
    /// Redisson's getLeaseTime reply (ms left, -1 for no lease, 0 when not held).
    pub(crate) async fn permit_lease_time(&self, name: &str, id: &[u8]) -> Result<i64, LockError> {
        let (set, channel) = (keys::permit_set(name), keys::semaphore_channel(name));
        let mut call = plain(&PERMIT_LEASE_TIME, &[name, &set, &channel], 2);
        call.arg(self.publish_command()).arg(id);
        let reply = self.run_plain("lease time", &call, name).await?;
        first("lease time", &reply)
    }

    /// Takes every free permit: how many there were.
    pub(crate) async fn drain_permits(
        &self,
        name: &str,
        latch: &SyncLatch,
    ) -> Result<i64, LockError> {
        let call = latched(&SEMAPHORE_DRAIN, &[name], 0, 0, latch);
        let (reply, _) = self
            .run_latched("drain permits", call, name, latch, Replicas::Skip)
            .await?;
        first("drain permits", &reply)
    }

    /// The free permits and, for a permit semaphore, the held ones (after reclaiming expired
    /// permits, as Redisson's availablePermits does).
    pub(crate) async fn count_permits(
        &self,
        kind: SyncKind,
        name: &str,
    ) -> Result<(i64, i64), LockError> {
        if kind != SyncKind::PermitSemaphore {
            return Ok((self.read_counter(name).await?, 0));
        }
        let (set, channel) = (keys::permit_set(name), kind.channel(name));
        let mut call = plain(&PERMIT_AVAILABLE, &[name, &set, &channel], 1);
        call.arg(self.publish_command());
        match self
            .run_plain("count permits", &call, name)
            .await?
            .as_slice()
        {
            [free, held] => Ok((*free, *held)),
            other => Err(unexpected_ints("count permits", other)),
        }
    }

    /// A semaphore's free permits or a latch's count, without changing anything (missing: 0).
    pub(crate) async fn read_counter(&self, name: &str) -> Result<i64, LockError> {
        let call = plain(&COUNTER, &[name], 0);
        let reply = self.run_plain("read count", &call, name).await?;
        first("read count", &reply)
    }

    /// Sets a latch's count when it is open: whether it did.
    pub(crate) async fn set_count(
        &self,
        name: &str,
        count: u64,
        latch: &SyncLatch,
    ) -> Result<bool, LockError> {
        let channel = keys::countdown_channel(name);
        let mut call = latched(&LATCH_SET, &[name, &channel], 2, 0, latch);
        call.arg(count).arg(self.publish_command());
        let (reply, _) = self
            .run_latched("set count", call, name, latch, Replicas::Skip)
            .await?;
        Ok(first("set count", &reply)? == 1)
    }

    /// Counts a latch down once: the count after it (0 or less: open).
    pub(crate) async fn count_down(&self, name: &str, latch: &SyncLatch) -> Result<i64, LockError> {
        let channel = keys::countdown_channel(name);
        let mut call = latched(&LATCH_COUNT_DOWN, &[name, &channel], 1, 0, latch);
        call.arg(self.publish_command());
        let (reply, _) = self
            .run_latched("count down", call, name, latch, Replicas::Skip)
            .await?;
        first("count down", &reply)
    }

    /// Renews the permits of up to `RENEW_BATCH` grants (`permit_renew.lua`): for each
    /// `(name, ids as hex joined by commas)`, whether all of them are still held.
    pub(crate) async fn renew_permits(
        &self,
        grants: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<Vec<bool>, LockError> {
        let bytes: usize = grants
            .iter()
            .map(|(name, ids)| 2 * name.len() + ids.len() + 32)
            .sum();
        let mut call = ScriptCall::new(&PERMIT_RENEW, 2 * grants.len(), 1 + grants.len(), bytes);
        for (name, _) in grants {
            call.key(*name).key(keys::permit_set(name));
        }
        call.arg(millis(timeout));
        for (_, ids) in grants {
            call.arg(ids_from_hex(ids));
        }
        let reply = self.conn().eval("renew permits", "", &call, Replicas::Wait);
        let flags = ints("renew permits", reply.await?.synced()?)?;
        if flags.len() != grants.len() {
            return Err(unexpected_ints("renew permits", &flags));
        }
        Ok(flags.into_iter().map(|f| f == 1).collect())
    }

    /// Everything about one synchronizer, changing nothing.
    pub(crate) async fn describe_sync(&self, name: &str) -> Result<SyncDescribed, LockError> {
        let set = keys::permit_set(name);
        let call = plain(&DESCRIBE, &[name, &set], 0);
        let reply = self.conn().eval("describe", name, &call, Replicas::Skip);
        let reply = reply.await?.value;
        let Value::Array(items) = reply else {
            return Err(unexpected("describe", reply));
        };
        let [kind, value, ttl, held, now] = items.as_slice() else {
            return Err(unexpected("describe", Value::Array(items)));
        };
        let text = |v: &Value| {
            redis::from_redis_value::<Option<String>>(v.clone())
                .ok()
                .flatten()
        };
        let int = |v: &Value| redis::from_redis_value::<i64>(v.clone()).unwrap_or(0);
        let mut pairs = Vec::new();
        if let Value::Array(held) = held {
            for pair in held.chunks(2) {
                if let [Value::BulkString(id), score] = pair {
                    pairs.push((hex(id), int(score)));
                }
            }
        }
        Ok(SyncDescribed {
            key_type: text(kind).unwrap_or_default(),
            value: text(value),
            ttl: match int(ttl) {
                ms if ms >= 0 => Some(Duration::from_millis(ms.unsigned_abs())),
                _ => None,
            },
            held: pairs,
            now: int(now),
        })
    }
}

/// Requests on one semaphore (or permit semaphore) behind one request latch: taking, giving
/// back and setting its permits.
#[derive(Clone, Copy)]
pub(crate) struct PermitCalls<'a> {
    commands: &'a Commands,
    kind: SyncKind,
    name: &'a str,
    latch: &'a SyncLatch,
}

impl PermitCalls<'_> {
    /// One attempt to take `permits` permits (`semaphore_acquire.lua`, `permit_acquire.lua`);
    /// a permit semaphore's carry `ids` (16 bytes each) and expire after `lease`.
    pub(crate) async fn take(
        self,
        permits: u32,
        ids: &[u8],
        lease: Duration,
    ) -> Result<Take, LockError> {
        let Self {
            commands,
            kind,
            name,
            latch,
        } = self;
        let call = if kind == SyncKind::PermitSemaphore {
            let (set, channel) = (keys::permit_set(name), kind.channel(name));
            let mut call = latched(
                &PERMIT_ACQUIRE,
                &[name, &set, &channel],
                4,
                ids.len(),
                latch,
            );
            call.arg(commands.publish_command())
                .arg(permits)
                .arg(millis(lease))
                .arg(ids);
            call
        } else {
            let mut call = latched(&SEMAPHORE_ACQUIRE, &[name], 1, 0, latch);
            call.arg(permits);
            call
        };
        let take = commands.run_latched("acquire permits", call, name, latch, Replicas::Wait);
        let (reply, unsynced) = take.await?;
        match (reply.as_slice(), unsynced) {
            ([1], Some(Unsynced { acked, wanted })) => Ok(Take::Unsynced { acked, wanted }),
            ([1], None) => Ok(Take::Taken),
            ([0, free], _) => Ok(Take::Short {
                free: *free,
                retry_in: None,
            }),
            ([0, free, wait], _) => Ok(Take::Short {
                free: *free,
                retry_in: u64::try_from(*wait).ok().map(Duration::from_millis),
            }),
            (other, _) => Err(unexpected_ints("acquire permits", other)),
        }
    }

    /// Gives permits back: `permits` of a semaphore (the new free count is the reply), or the
    /// permits `ids` of a permit semaphore (the reply is how many were still held).
    pub(crate) async fn give(self, permits: u32, ids: &[u8]) -> Result<i64, LockError> {
        let Self {
            commands,
            kind,
            name,
            latch,
        } = self;
        let channel = kind.channel(name);
        let call = if kind == SyncKind::PermitSemaphore {
            let set = keys::permit_set(name);
            let mut call = latched(
                &PERMIT_RELEASE,
                &[name, &set, &channel],
                2,
                ids.len(),
                latch,
            );
            call.arg(commands.publish_command()).arg(ids);
            call
        } else {
            let mut call = latched(&SEMAPHORE_RELEASE, &[name, &channel], 2, 0, latch);
            call.arg(permits).arg(commands.publish_command());
            call
        };
        let (reply, _) = commands
            .run_latched("release permits", call, name, latch, Replicas::Skip)
            .await?;
        first("release permits", &reply)
    }

    /// Sets the permits of a semaphore that has none, the key living `ttl` when given: whether
    /// it did.
    pub(crate) async fn set(self, permits: u32, ttl: Option<Duration>) -> Result<bool, LockError> {
        let Self {
            commands,
            kind,
            name,
            latch,
        } = self;
        let channel = kind.channel(name);
        let mut call = latched(&SEMAPHORE_SET, &[name, &channel], 3, 0, latch);
        call.arg(permits)
            .arg(commands.publish_command())
            .arg(ttl.map_or(0, millis));
        let (reply, _) = commands
            .run_latched("set permits", call, name, latch, Replicas::Skip)
            .await?;
        Ok(first("set permits", &reply)? == 1)
    }
}

/// A call of `script` on `keys` (the synchronizer first), followed by the latch key of
/// `latch` (`KEYS[#KEYS]`, `sync/latch.lua`); then come `args` arguments of about `bytes` bytes
/// in all, and [`Commands::run_latched`] appends the latch's two.
fn latched<'s>(
    script: &'s Script,
    keys: &[&str],
    args: usize,
    bytes: usize,
    latch: &SyncLatch,
) -> ScriptCall<'s> {
    let name = keys.first().copied().unwrap_or_default();
    let room: usize = keys.iter().map(|k| k.len()).sum::<usize>() + name.len() + bytes + 96;
    let mut call = ScriptCall::new(script, keys.len() + 1, args + 2, room + latch.lane.len());
    for key in keys {
        call.key(*key);
    }
    call.key(keys::latch(name, &latch.lane));
    call
}

/// A call of `script` on `keys` without a latch: `args` arguments follow.
fn plain<'s>(script: &'s Script, keys: &[&str], args: usize) -> ScriptCall<'s> {
    let room: usize = keys.iter().map(|k| k.len()).sum::<usize>() + 64;
    let mut call = ScriptCall::new(script, keys.len(), args, room);
    for key in keys {
        call.key(*key);
    }
    call
}

/// A reply that is an array of integers.
fn ints(op: &'static str, reply: Value) -> Result<Vec<i64>, LockError> {
    match reply {
        Value::Array(items) => items
            .into_iter()
            .map(|v| match v {
                Value::Int(n) => Ok(n),
                other => Err(unexpected(op, other)),
            })
            .collect(),
        other => Err(unexpected(op, other)),
    }
}

fn first(op: &'static str, reply: &[i64]) -> Result<i64, LockError> {
    reply
        .first()
        .copied()
        .ok_or_else(|| unexpected_ints(op, reply))
}

/// An array of integers the protocol does not allow here, reported as it came.
fn unexpected_ints(op: &'static str, reply: &[i64]) -> LockError {
    LockError::unexpected_reply(op, format!("{reply:?}"))
}

/// Bytes as lowercase hex: how Java shows a permit id.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Permit ids written as hex and joined by commas, back to their bytes, concatenated. Bad hex
/// (which lockman never writes) gives no bytes for that pair.
pub(crate) fn ids_from_hex(ids: &str) -> Vec<u8> {
    let digits: Vec<u8> = ids.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .filter_map(|pair| {
            let text = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(text, 16).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_hex() {
        let ids: Vec<u8> = (0..32).collect();
        let text = format!("{},{}", hex(&ids[..16]), hex(&ids[16..]));
        assert_eq!(text.len(), 65);
        assert_eq!(ids_from_hex(&text), ids);
    }
}
