//! What the synchronizer state asks its shell to do, and what the shell reports back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::actors::messages::Adjustment;
use crate::actors::name::{Loss, WaiterId};
use crate::error::LockError;
use crate::protocol::Take;

/// The number of a caller waiting for a give-back's or an adjustment's reply, chosen by the
/// shell.
pub(crate) type ReplyId = u64;

/// One effect, carried out by the shell in the order given.
#[derive(Debug)]
pub(crate) enum Effect {
    /// Make this round trip to Redis and report its [`Outcome`] with `SyncState::ran`. A trip
    /// of a number seen before is the same request sent again: it goes with the same request
    /// latch (made once per number, on `lane`), so Redis counts it once.
    Run(Trip),
    /// Answer waiter `id`'s caller; the waiter is gone from the state.
    Answer(WaiterId, Answer),
    /// Tell the sender of give-back `id` how it went.
    ReleaseDone(ReplyId, Result<(), LockError>),
    /// Tell the sender of adjustment `id` what Redis replied.
    AdjustDone(ReplyId, Result<i64, LockError>),
    /// Subscribe the channel; report with `SyncState::subscribed`.
    Subscribe,
    Unsubscribe,
    /// Fire `timer` after this long (replacing the same timer if armed); report with
    /// `SyncState::fired`.
    Arm(Timer, Duration),
    /// Disarm `timer` (nothing when it is not armed).
    Cancel(Timer),
    /// Hand the permits of this epoch (taken without a lease) to the Watchdog for renewal.
    /// `confirmed`: when Redis last set their PTTL.
    Track {
        epoch: u64,
        ids: Arc<[u8]>,
        confirmed: Instant,
    },
    /// The Watchdog stops renewing the permits of this epoch.
    Untrack {
        epoch: u64,
        ids: Arc<[u8]>,
    },
    /// The permits of this epoch are gone from Redis: tell their guard.
    Lost(u64, Loss),
    /// The permits of this epoch were given back (or are being): forget their signal.
    Ended(u64),
    /// The first waiter, hold or round trip arrived: stay alive.
    Busy,
    /// No waiter, hold or round trip left: the actor may stop, after lingering a while.
    Idle,
    /// A requested stop has done its last round trip: every signal left is lost, and the
    /// actor stops.
    Stopped,
}

/// One round trip: its number, the request-latch lane it runs on, and what it runs.
#[derive(Clone, Debug)]
pub(crate) struct Trip {
    pub seq: u64,
    pub lane: u32,
    pub op: Op,
}

/// One Redis round trip of a synchronizer name. Every one but a latch's read carries a request
/// latch, so a request sent again is counted once (docs/protocol.md, "Requests sent again").
#[derive(Clone, Debug)]
pub enum Op {
    /// Take a waiter's permits, for `lease` (the watchdog timeout when taken without one).
    Take {
        waiter: WaiterId,
        permits: u32,
        ids: Arc<[u8]>,
        lease: Duration,
    },
    /// Read a latch's count for a waiter.
    Read { waiter: WaiterId },
    /// Give back permits (a plain semaphore's carry no ids).
    Give { permits: u32, ids: Arc<[u8]> },
    /// A public adjustment.
    Adjust(Adjustment),
    /// A permit semaphore's release of these ids (16 bytes each), all or nothing.
    ReleaseIds(Arc<[u8]>),
}

/// The result of an [`Op`].
#[derive(Debug)]
pub(crate) enum Outcome {
    /// A [`Op::Take`]'s.
    Take(Result<Take, LockError>),
    /// Any other op's: the number Redis replied.
    Reply(Result<i64, LockError>),
}

impl Outcome {
    /// The error of a request whose reply never came: it may or may not have run.
    pub(crate) fn unknown(&self) -> bool {
        match self {
            Outcome::Take(Err(e)) | Outcome::Reply(Err(e)) => e.outcome_unknown(),
            _ => false,
        }
    }
}

/// How a waiter's request ends.
#[derive(Debug)]
pub(crate) enum Answer {
    /// Done; `waited`: it was left waiting (queued at arrival, or an attempt fell short).
    /// `grant`: the permits taken (none for a latch).
    Done {
        waited: bool,
        grant: Option<Granted>,
    },
    TimedOut,
    Failed(LockError),
}

/// Permits granted: their epoch, count and ids, and what Redis confirmed of them (the instant
/// the take was first sent and the TTL it set; none for a plain semaphore's, which never expire).
#[derive(Debug)]
pub(crate) struct Granted {
    pub epoch: u64,
    pub permits: u32,
    pub ids: Arc<[u8]>,
    pub confirmed: Option<(Instant, Duration)>,
}

/// Timers the state arms.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Timer {
    /// Waiter `id`'s wait runs out: one more attempt decides.
    Deadline(WaiterId),
    /// Parked waiters due a retry try again: an error's backoff passed, a failed subscription's
    /// pause, or a permit semaphore's held permit expired.
    Retry,
    /// The lease of the permits of this epoch runs out.
    Expiry(u64),
    /// Send again request `seq`, whose reply never came.
    Resend(u64),
}
