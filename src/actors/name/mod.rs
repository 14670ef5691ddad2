//! The vocabulary of a per-name state, whatever its family (locks in `lock_state/`,
//! synchronizers in `sync_state/`), pure like them (no actix, tokio or Redis): how long a request
//! may wait ([`Wait`]), how waiters are numbered, the backoff after errors, why a hold ends
//! without its release ([`Loss`]), what the Watchdog renews ([`Renewal`]), the effects both
//! states emit (`effect`), which the shell (`actors::shell`) carries out, the events both
//! states take (`state`), through which the shell drives them, a table of timers as instants
//! (`timers`), whose next one the shell keeps, Redis away for a name (`outage`), what a family
//! keeps of its waits and holds beside the shell (`witness`), and a map for the few entries an
//! actor mostly keeps (`few`).

pub(crate) mod effect;
pub(crate) mod few;
pub(crate) mod outage;
#[cfg(test)]
pub(crate) mod seeded;
pub(crate) mod state;
pub(crate) mod timers;
pub(crate) mod witness;

use std::time::Duration;

use crate::protocol::LockKind;

/// A waiter's number, unique within its actor.
pub(crate) type WaiterId = u64;

/// How long an [`Acquire`](crate::actix::Acquire) (or a synchronizer's wait) may wait while the lock is
/// held by someone else (or too few permits are free).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wait {
    /// One attempt; `None` when the lock is busy.
    No,
    /// Wait up to this long, then `None`.
    Up(Duration),
    /// Wait until the lock is acquired.
    Forever,
}

impl Wait {
    /// A wait of zero is one attempt: `Up(0)` is `No`, wherever a request is served.
    pub(crate) fn normalized(self) -> Self {
        match self {
            Wait::Up(d) if d.is_zero() => Wait::No,
            other => other,
        }
    }
}

/// Where a per-name state is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Running,
    /// Asked to stop: nothing new is served; its last round trips are under way.
    Stopping,
    /// The stop's last round trip is done: nothing runs any more.
    Stopped,
}

/// How many local hand-offs may follow each other: when a release frees a lock (or permits) that
/// a waiter of the same manager waits for, it goes to that waiter with no unlock message. After
/// this many in a row, the next release publishes as usual, so that waiters in other processes
/// (woken only by the message) get their chance.
pub const MAX_HAND_OFF_STREAK: u32 = 8;

/// The first retry delay after a retryable Redis error.
const ERROR_BACKOFF_MIN: Duration = Duration::from_millis(50);
/// The longest retry delay after retryable Redis errors.
pub(crate) const ERROR_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// The delay before retrying after `failures` retryable errors in a row: doubling from 50 ms,
/// at most 2 s. Lock and synchronizer waiters, and requests sent again, share it.
pub(crate) fn backoff(failures: u32) -> Duration {
    ERROR_BACKOFF_MIN
        .saturating_mul(1 << failures.min(6))
        .min(ERROR_BACKOFF_MAX)
}

/// Why a hold (of a lock, or permits) ended without its release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loss {
    /// The watchdog found it gone, or could not renew it for a whole watchdog timeout.
    Watchdog,
    /// Its release found it gone.
    Release,
    /// Gone by the time releases of unknown outcome were settled.
    Unconfirmed,
    /// Its lease ran out.
    Lease,
    /// Its manager shut down: released it, or (a synchronizer's permits, without release on
    /// shutdown) left it to its lease.
    Shutdown,
    /// A re-entry of its holder found no count of it in Redis: the key was deleted or expired
    /// before a renewal noticed.
    Reentry,
}

impl Loss {
    /// The `reason` label of the lost-holds metrics.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Loss::Watchdog => "watchdog",
            Loss::Release => "release",
            Loss::Unconfirmed => "unconfirmed",
            Loss::Lease => "lease",
            Loss::Shutdown => "shutdown",
            Loss::Reentry => "reentry",
        }
    }

    /// Why, in words, for the logs.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Loss::Watchdog => "renewal found it gone or failed too long",
            Loss::Release => "release found it gone",
            Loss::Unconfirmed => "gone while releases were unconfirmed",
            Loss::Lease => "its lease ran out",
            Loss::Shutdown => "its manager shut down",
            Loss::Reentry => "a re-entry found it gone from Redis",
        }
    }
}

/// What the Watchdog renews: a hold of a lock of some kind, or the permits of one grant of a
/// permit semaphore (the holder is then the permit ids, in hex, joined by commas).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Renewal {
    Lock(LockKind),
    Permits,
}
