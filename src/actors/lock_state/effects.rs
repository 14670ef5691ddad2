//! What the state machine asks its shell to do, and what the shell reports back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{HoldKey, WaiterId};
pub(crate) use crate::actors::name::Loss;
use crate::actors::name::effect::Family;
use crate::error::LockError;
use crate::protocol::{Attempt, Expect, FairArgs, HandedOff, LockKind, Refreshed};

/// The lock family, for the effects both families share ([`name::effect`]).
///
/// [`name::effect`]: crate::actors::name::effect
#[derive(Debug)]
pub(crate) struct Locks;

impl Family for Locks {
    type Op = Op;
    type Answer = Answer;
    type Hold = HoldKey;
    /// A release answers nothing more than that it went well.
    type Done = ();
}

/// One effect of a lock name, carried out by the shell in the order given.
pub(crate) type Effect = crate::actors::name::effect::Effect<Locks>;

/// How a request ended.
#[derive(Debug)]
pub(crate) enum Answer {
    /// Granted: the hold's key, its epoch, a fenced lock's token, and when Redis last granted
    /// the hold (the grant's call was sent then) with the TTL it set: what its guards'
    /// validity starts from (as a synchronizer's grant carries it).
    Granted {
        key: HoldKey,
        epoch: u64,
        token: Option<u64>,
        confirmed: Option<(Instant, Duration)>,
    },
    /// The wait ran out (or a single attempt found the lock busy).
    TimedOut,
    /// An error that ends the request.
    Failed(LockError),
}

/// Timers the state machine arms: a waiter's deadline with [`Effect::Arm`](super::Effect),
/// every other in its table (`timers.rs`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Timer {
    /// Waiter `id`'s wait runs out.
    Deadline(WaiterId),
    /// The head waiter's next attempt: the holder's TTL ran out, or an error's backoff passed.
    Retry,
    /// Hand the watchdog holds old enough to the Watchdog.
    Track,
    /// A lease hold's lease runs out.
    Expiry(HoldKey, u64),
    /// Send again request `seq` ([`Op::seq`]), whose reply never came.
    Resend(u64),
    /// Settle this holder's count (`Op::Settle`): again after a failure, or a hold's
    /// unconfirmed releases.
    Settle(HoldKey),
    /// Refresh this actor's fair-queue places.
    Refresh,
    /// Send again the fair-queue leave of this holder, which failed or went unanswered.
    Leave(Arc<str>),
    /// Redis has been away for `unavailable_after` of a waiter's wait (`outage.rs`).
    Unavailable,
    /// Redis has said nothing for [`LAST_TRY_GRACE`](crate::config::LAST_TRY_GRACE) to the
    /// waiters at their last try (`outage.rs`): they are answered `Unavailable`.
    Verdict,
    /// The hold-back after a streak of local hand-offs ended (see `turns`): the head waiter
    /// tries.
    Turn,
}

/// One Redis round trip for the lock's name. Acquires, releases and hand-offs carry the counts
/// they [`Expect`] and a number: sent again, they reply as their first run did.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    /// One acquire attempt (`ttl`: the lease it sets).
    Acquire {
        kind: LockKind,
        holder: Arc<str>,
        ttl: Duration,
        fair: FairArgs,
        /// The holder's count before it.
        expect: Expect,
        /// This request's number in its lock actor, for resends.
        seq: u64,
    },
    /// Release one hold, restoring `lease` when holds remain.
    Release {
        kind: LockKind,
        holder: Arc<str>,
        lease: Duration,
        expect: Expect,
        seq: u64,
    },
    /// Release `from`'s hold and, when that frees the lock, grant it to `to` for `to_lease` in the
    /// same script (no publish).
    HandOff {
        kind: LockKind,
        from: Arc<str>,
        lease: Duration,
        to: Arc<str>,
        to_lease: Duration,
        /// Both holders' counts before it.
        expect: Expect,
        seq: u64,
    },
    /// A fair-lock waiter leaves the Redis queue.
    LeaveQueue { holder: Arc<str>, wait: Duration },
    /// Bring the holder's count in Redis down to `target` (requests given up unresolved, or
    /// releases that failed, left it above), by reading it and releasing what is over.
    Settle {
        kind: LockKind,
        holder: Arc<str>,
        target: u32,
        lease: Duration,
        /// The hold's lease ran out here ([`Trips::lapsed`](super::trips::Trips::lapsed)): it
        /// ended without a release, so the releases that settle it leave the name's lock-delay.
        lapsed: bool,
    },
    /// Keep this actor's fair-queue places alive: each holder with the wait of its place, the
    /// head's base capped at `cap` (`fair_refresh.lua`).
    FairRefresh {
        places: Vec<(Arc<str>, Duration)>,
        cap: Duration,
    },
    /// Stopping: leave fair queues, then release each hold entirely (as `Settle` to 0).
    Shutdown {
        leave: Vec<(Arc<str>, Duration)>,
        release: Vec<(HoldKey, Duration)>,
        /// Those of `release` whose lease ran out here: their releases leave the lock-delay.
        lapsed: Vec<HoldKey>,
    },
}

/// Releases at shutdown tried again after a failure that came quickly (a dropped connection).
const SHUTDOWN_RETRIES: u32 = 3;
/// A failed try that took this long is not tried again (Redis frozen or away: each try would
/// wait a response timeout); also four times the first backoff.
const SHUTDOWN_RETRY_WITHIN: Duration = Duration::from_millis(400);

/// Whether a release of [`Op::Shutdown`] that failed (or left a count) at its `tries`-th try,
/// which took `took`, is tried again, and after what backoff. A connection that just dropped
/// fails the first try at once (the connection actor makes it again meanwhile): tried again
/// after a short backoff, for up to `SHUTDOWN_RETRIES`; not after a try that took long (a
/// frozen server's response timeout), so that a shutdown stays as bounded as before.
pub(crate) fn shutdown_retry(tries: u32, took: Duration) -> Option<Duration> {
    (tries <= SHUTDOWN_RETRIES && took < SHUTDOWN_RETRY_WITHIN)
        .then(|| SHUTDOWN_RETRY_WITHIN / 4 * tries)
}

impl Op {
    /// The holds it may change: its holder's, and a hand-off's next holder's.
    pub(crate) fn keys(&self) -> impl Iterator<Item = HoldKey> {
        let (first, second) = match self {
            Op::Acquire { kind, holder, .. } | Op::Release { kind, holder, .. } => {
                (Some((holder.clone(), *kind)), None)
            }
            Op::HandOff { kind, from, to, .. } => {
                (Some((from.clone(), *kind)), Some((to.clone(), *kind)))
            }
            _ => (None, None),
        };
        first.into_iter().chain(second)
    }

    /// The number of an acquire, release or hand-off: the requests sent again until answered.
    pub(crate) fn seq(&self) -> Option<u64> {
        match self {
            Op::Acquire { seq, .. } | Op::Release { seq, .. } | Op::HandOff { seq, .. } => {
                Some(*seq)
            }
            _ => None,
        }
    }
}

/// The result of an [`Op`], in the same order.
#[derive(Debug)]
pub(crate) enum Outcome {
    Acquire(Result<Attempt, LockError>),
    /// A release or a hand-off (a plain release is `HandedOff::No`).
    Release(Result<HandedOff, LockError>),
    LeaveQueue(Result<bool, LockError>),
    FairRefresh(Result<Refreshed, LockError>),
    /// The holder's count in Redis afterwards.
    Settle(Result<u32, LockError>),
    Shutdown,
}

impl Outcome {
    /// The error of a request whose reply never came: it may or may not have run.
    pub(crate) fn unknown(&self) -> Option<&LockError> {
        match self {
            Outcome::Acquire(Err(e)) | Outcome::Release(Err(e)) if e.outcome_unknown() => Some(e),
            _ => None,
        }
    }
}
