//! The protocol layer: the Lua scripts of `protocol.md`, run by EVALSHA, and their replies decoded
//! into types. No actix here: actors call these, and so do the handles for read-only queries.

mod adjust;
mod clients;
mod commands;
mod deadlocks;
mod fence;
mod group;
pub(crate) mod keys;
mod kind;
mod probe;
mod sync;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Script, Value};

use crate::error::LockError;

pub use adjust::Adjustment;
pub(crate) use clients::{ClientRecord, MAX_LISTED, RawRecord, RecordedHold, RecordedWait};
pub(crate) use commands::{Commands, Successor};
pub(crate) use deadlocks::{Blocked, Published, group_holder_of, holder_of};
pub use group::MAX_GROUP_MEMBERS;
pub(crate) use group::{Groups, Registration, check_members};
pub use kind::LockKind;
pub(crate) use probe::check_subscribe;
pub use sync::SyncKind;
pub(crate) use sync::{NO_LEASE_SCORE, SyncDescribed, SyncLatch, Take, hex};

/// A script made of several parts, joined into one when the crate is built (so that each still
/// runs as one script).
macro_rules! joined {
    ($($part:literal),+) => {
        LazyLock::new(|| Script::new(concat!($(include_str!($part),)+)))
    };
}

static ACQUIRE: LazyLock<Script> = joined!("acquire.lua");
// The release and hand-off scripts both begin by releasing one hold.
static RELEASE: LazyLock<Script> = joined!("release_prologue.lua", "release.lua");
static SPIN_RELEASE: LazyLock<Script> = joined!("release_prologue.lua", "spin_release.lua");
static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("force_unlock.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("renew.lua")));
static RENEW_DELAY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("renew_delay.lua")));
static HELD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("held.lua")));
static INSPECT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("inspect.lua")));
static FENCED_ACQUIRE: LazyLock<Script> = joined!("fence_token.lua", "fenced_acquire.lua");
static READ_ACQUIRE: LazyLock<Script> = joined!("read_acquire.lua");
static READ_RELEASE: LazyLock<Script> = joined!("read_release.lua");
static WRITE_ACQUIRE: LazyLock<Script> = joined!("write_acquire.lua");
static WRITE_RELEASE: LazyLock<Script> = joined!("write_release.lua");
static RENEW_READ: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("renew_read.lua")));
// The fair acquire and release scripts both begin by dropping stale queue heads.
// A fair acquire: prune, take or find a resend, re-enter (or refuse to), queue.
static FAIR_ACQUIRE: LazyLock<Script> = joined!(
    "fair_prune.lua",
    "fair_acquire.lua",
    "fair_reenter.lua",
    "fair_queue.lua"
);
static FAIR_RELEASE: LazyLock<Script> = joined!("fair_prune.lua", "fair_release.lua");
// The non-reentrant kinds' acquires; their releases are the reentrant and fair lock's.
static NON_REENTRANT_ACQUIRE: LazyLock<Script> = joined!("nonreentrant_acquire.lua");
static FAIR_NON_REENTRANT_ACQUIRE: LazyLock<Script> = joined!(
    "fair_prune.lua",
    "fair_acquire.lua",
    "fair_refuse_reentry.lua",
    "fair_queue.lua"
);
// A hand-off sent again is recognised before the release (`hand_off_again.lua`).
static HAND_OFF: LazyLock<Script> = joined!(
    "fence_token.lua",
    "hand_off_again.lua",
    "release_prologue.lua",
    "hand_off.lua"
);
// A fair force unlock prunes the queue first too, as Redisson's does.
static FAIR_FORCE_UNLOCK: LazyLock<Script> = joined!("fair_prune.lua", "fair_force_unlock.lua");
// lockman's places kept alive: prune first, as an acquire does.
static FAIR_REFRESH: LazyLock<Script> = joined!("fair_prune.lua", "fair_refresh.lua");
static FAIR_LEAVE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("fair_leave.lua")));
static DESCRIBE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("describe.lua")));
static CLEAR_DELAY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("clear_delay.lua")));

/// Every script lockman runs: loaded at start, so that a missing permission shows then.
fn all_scripts() -> Vec<&'static Script> {
    let mut scripts: Vec<&'static Script> = vec![
        &ACQUIRE,
        &RELEASE,
        &SPIN_RELEASE,
        &HAND_OFF,
        &FORCE_UNLOCK,
        &RENEW,
        &HELD,
        &RENEW_DELAY,
        &INSPECT,
        &FENCED_ACQUIRE,
        &READ_ACQUIRE,
        &READ_RELEASE,
        &WRITE_ACQUIRE,
        &WRITE_RELEASE,
        &RENEW_READ,
        &FAIR_ACQUIRE,
        &FAIR_RELEASE,
        &NON_REENTRANT_ACQUIRE,
        &FAIR_NON_REENTRANT_ACQUIRE,
        &FAIR_LEAVE,
        &FAIR_REFRESH,
        &FAIR_FORCE_UNLOCK,
        &DESCRIBE,
        &CLEAR_DELAY,
        &probe::ACL_PROBE,
    ];
    scripts.extend(sync::sync_scripts());
    scripts.extend(fence::fence_scripts());
    scripts.extend(clients::record_scripts());
    scripts.extend(group::group_scripts());
    scripts
}

/// A fair-lock refresh's reply (`fair_refresh.lua`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Refreshed {
    /// The queue's head, when the lock is free.
    pub head: Option<Arc<str>>,
    /// The holders refreshed that are no longer queued.
    pub gone: Vec<Arc<str>>,
}

/// What a fair-lock attempt also needs: the waiter's wait (its place in the queue expires that
/// long after its turn) and whether it may enqueue at all.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FairArgs {
    pub wait: Duration,
    pub once: bool,
    /// lockman's place timeout: the most of the lock's PTTL a place at the head counts in its
    /// deadline (`fair_queue.lua`, ARGV[7]).
    pub cap: Duration,
}

/// The most holds one renewal script call carries.
pub(crate) const RENEW_BATCH: usize = 100;

/// The hold counts a lock request expects its holders to have in Redis before it runs
/// (docs/protocol.md, "Sent again"): the lock actor knows them exactly, being the only writer of
/// its holders' fields, with one request of a holder under way at a time. A script sent again
/// after its first run finds the count that run left (one more for an acquire, one less for a
/// release), replies as then and changes nothing; so a reply that never came is resolved by
/// sending the same request again, with no key written to remember it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Expect {
    /// The holder's count (of a hand-off: the releasing holder's).
    pub count: u32,
    /// A hand-off's next holder's count.
    pub to: u32,
}

impl Expect {
    /// A request of one holder, whose count is `count`.
    pub(crate) fn count(count: u32) -> Self {
        Self { count, to: 0 }
    }
}

/// A synchronizer request's number (`sync/latch.lua`, docs/protocol.md "Requests sent again"): sent
/// again with the same number, the request replies as its first run did and changes nothing.
/// Lock requests have none: the counts they [`Expect`] tell instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Latch {
    /// This request's number ([`Latch::new`]), unique in the process.
    pub id: u64,
}

/// Request numbers.
static NEXT_REQUEST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Latch {
    /// The latch of a new request.
    pub(crate) fn new() -> Self {
        Self {
            id: NEXT_REQUEST.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }
}

/// The outcome of one acquire attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The holder's count was incremented and the lease set; a fenced lock's token. `fresh`:
    /// the holder had no count in Redis before (a new hold, not a re-entry).
    Acquired { token: Option<u64>, fresh: bool },
    /// Acquired, but fewer replicas than `Config::sync_replicas` asks for acknowledged it: the
    /// hold is to be released again, and the request fails with `LockError::ReplicaSync`.
    Unsynced { acked: u32, wanted: u32 },
    /// Another holder has it, for `ttl` more (`None`: the key has no expiry).
    Busy { ttl: Option<Duration> },
    /// A re-entry found its holder's field gone (the reply `{0}`): nothing was taken, and the
    /// hold it would re-enter is lost. Asked again, it is a new hold.
    Gone,
}

/// The outcome of one release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// The holder had no field: nothing changed.
    NotHeld,
    /// The count went down and is still above zero.
    StillHeld,
    /// The holder's last hold is gone: the key was deleted and the unlock message published,
    /// unless other holders of a read-write lock remain.
    Unlocked,
}

/// The outcome of a release that may hand the lock to a local waiter (`hand_off.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HandedOff {
    /// No hand-off: what the release did.
    No(Released),
    /// The lock went to the waiter in the same call; a fenced lock's new token.
    To { token: Option<u64> },
}

/// Every key of one lock, as `describe.lua` read them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Described {
    /// The hash: holder fields (and `mode` for a read-write lock) with their values.
    pub fields: Vec<(String, String)>,
    pub ttl: Option<Duration>,
    /// A fair lock's queue, oldest first.
    pub queue: Vec<String>,
    /// A fair lock's waiters with their deadlines (epoch ms).
    pub deadlines: Vec<(String, String)>,
    /// A fenced lock's counter: the newest token handed out.
    pub token: Option<u64>,
    /// The server's clock when it was read (epoch ms): what the deadlines are counted from.
    pub now_ms: Option<u64>,
    /// How long the reentrant lock's delay key lives on (docs/protocol.md "Lock-delay"), when
    /// there is one (and the user may read it).
    pub delay: Option<Duration>,
}

/// A lock's state as seen by one holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Inspection {
    pub locked: bool,
    pub count: u32,
    pub ttl: Option<Duration>,
}

/// An acquire script's reply: `[count]` (acquired; the holder's count now), `[token, count]` (a
/// fenced lock acquired), `[0]` (a re-entry whose hold is gone), or the PTTL.
fn decode_attempt(kind: LockKind, reply: Value) -> Result<Attempt, LockError> {
    let acquired = |token: Option<&i64>, count: &i64| Attempt::Acquired {
        token: token.and_then(|t| u64::try_from(*t).ok()),
        fresh: *count == 1,
    };
    match (kind, reply) {
        (_, Value::Array(items)) if matches!(items.as_slice(), [Value::Int(0)]) => {
            Ok(Attempt::Gone)
        }
        (LockKind::Fenced, Value::Array(items)) => match items.as_slice() {
            [Value::Int(t), Value::Int(n)] => Ok(acquired(Some(t), n)),
            _ => Err(unexpected("acquire", Value::Array(items))),
        },
        (_, Value::Array(items)) => match items.as_slice() {
            [Value::Int(n)] => Ok(acquired(None, n)),
            _ => Err(unexpected("acquire", Value::Array(items))),
        },
        (_, Value::Int(ttl)) => Ok(Attempt::Busy { ttl: ttl_of(ttl) }),
        (_, other) => Err(unexpected("acquire", other)),
    }
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
    LockError::unexpected_reply(op, format!("{reply:?}"))
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
