//! What the synchronizer state asks its shell to do, and what the shell reports back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::SyncState;
use super::timers::Timers;
use crate::actors::name::effect::Family;
use crate::actors::name::state::NameState;
use crate::actors::name::{Renewal, WaiterId};
use crate::error::LockError;
use crate::protocol::{Adjustment, SyncKind, Take, hex};

pub(crate) use crate::actors::name::effect::ReplyId;

/// The synchronizer family, for the effects both families share ([`name::effect`]).
///
/// [`name::effect`]: crate::actors::name::effect
#[derive(Debug)]
pub(crate) struct Syncs;

impl Family for Syncs {
    type Op = Trip;
    type Answer = Answer;
    /// A grant's permit ids (none for a plain semaphore's).
    type Hold = Arc<[u8]>;
    /// An adjustment's number; a give-back's is 0.
    type Done = i64;
}

/// One effect of a synchronizer name, carried out by the shell in the order given. A trip
/// ([`Effect::Run`]) of a number seen before is the same request sent again: it goes with the
/// same request latch (made once per number, on its `lane`), so Redis counts it once.
pub(crate) type Effect = crate::actors::name::effect::Effect<Syncs>;

/// The events the shell drives: most are the state's own methods; the rest read the shell's
/// reports in a synchronizer's terms.
impl NameState for SyncState {
    type Family = Syncs;
    type Timer = Timer;

    fn drain_into(&mut self, out: &mut Vec<Effect>) {
        SyncState::drain_into(self, out);
    }

    fn deadline(&mut self, id: WaiterId, now: Instant) {
        self.fired(Timer::Deadline(id), now);
    }

    fn timers(&self) -> &Timers {
        &self.timers
    }

    fn timers_mut(&mut self) -> &mut Timers {
        &mut self.timers
    }

    fn fired(&mut self, timer: Timer, now: Instant) {
        SyncState::fired(self, timer, now);
    }

    /// A synchronizer has one channel.
    fn subscribed(&mut self, _: &str, ok: bool, now: Instant) {
        SyncState::subscribed(self, ok, now);
    }

    fn message(&mut self, _: &str, count: Option<i64>, now: Instant) {
        self.unlocked(count, now);
    }

    fn pubsub(&mut self, lost: Option<LockError>, now: Instant) {
        match lost {
            Some(why) => self.connection_lost(why, now),
            None => self.resubscribed(now),
        }
    }

    fn renewal_lost(&mut self, _: Arc<str>, what: Renewal, epoch: u64, now: Instant) {
        if what == Renewal::Permits {
            self.hold_lost(epoch, now);
        }
    }

    fn caller_left(&mut self, id: WaiterId, now: Instant) -> bool {
        self.caller_gone(id, now);
        !self.has(id)
    }

    fn stop(&mut self, release: bool, now: Instant) {
        SyncState::stop(self, release, now);
    }

    fn abandon(&mut self) {
        SyncState::abandon(self);
    }

    fn outcome(&self, answer: &Answer) -> &'static str {
        match (answer, self.kind) {
            (Answer::Done { .. }, SyncKind::CountDownLatch) => "opened",
            (Answer::Done { .. }, _) => "acquired",
            (Answer::TimedOut, _) => "timed_out",
            (Answer::Failed(LockError::Unavailable { .. }), _) => "unavailable",
            (Answer::Failed(_), _) => "failed",
        }
    }

    /// Permit ids as the Watchdog carries them: hex, one per 16 bytes, joined by commas.
    fn renewal(&self, ids: &Arc<[u8]>) -> (Arc<str>, Renewal) {
        let hex_ids = ids.chunks(16).map(hex).collect::<Vec<_>>().join(",");
        (hex_ids.into(), Renewal::Permits)
    }
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
pub(crate) enum Op {
    /// Take a waiter's permits, for `lease` (the watchdog timeout when taken without one).
    Take {
        /// Whose (the state knows it by the trip's number; shown in traces and read by tests).
        #[cfg_attr(not(test), allow(dead_code))]
        waiter: WaiterId,
        permits: u32,
        ids: Arc<[u8]>,
        lease: Duration,
    },
    /// Read a latch's count for a waiter.
    Read {
        #[cfg_attr(not(test), allow(dead_code))]
        waiter: WaiterId,
    },
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

/// Timers the state arms: a waiter's deadline with [`Effect::Arm`], every other in its table
/// (`timers.rs`).
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
    /// Redis has been away for `unavailable_after` of a waiter's wait (`outage.rs`).
    Unavailable,
}
