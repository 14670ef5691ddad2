//! The rules of one lock name, as a state machine with no actix, no timers and no Redis: events
//! go in (a request, a script's reply, an unlock message, a timer, a caller gone), and the
//! [`Effect`]s to carry out come out, in order. The [`LockActor`](super::LockActor) is its shell.
//!
//! What it guarantees (and `tests/` checks: unit tests in `mod.rs`, random event sequences in
//! `property.rs`, the seeded simulation of several managers in `simulation.rs`):
//! - one round trip at a time: attempts and releases of one name never interleave;
//! - every waiter is answered exactly once, and never while it still counts as waiting;
//! - a subscribed channel always has a waiter that needs it;
//! - never two local holds of an exclusive kind; hold counts never go below one;
//! - a grant nobody takes any more is released, never leaked;
//! - fair lock: when nothing is under way, each place of this actor's holders in the Redis queue
//!   has a local waiter, or its failed leave is being sent again (`places`, `leaving`).

mod effects;
mod holds;
mod outcomes;
mod round_trips;
#[cfg(test)]
mod tests;
mod unsure;
mod waiters;
mod wake;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::{FxHashMap, FxHashSet};

pub(crate) use effects::{Answer, Effect, Locks, Loss, Op, Outcome, Timer};
use holds::Hold;

use round_trips::{Flight, Leaving, Pending};
use unsure::Unsure;
use waiters::{Waiter, Waiters};

pub(crate) use crate::actors::name::{
    ERROR_BACKOFF_MAX, MAX_HAND_OFF_STREAK, Phase, Wait, WaiterId, backoff,
};
use crate::error::LockError;
use crate::protocol::{Attempt, FairArgs, HandedOff, LockKind, Refreshed, Released};

pub(crate) use crate::actors::name::effect::ReplyId;
/// A hold's identity: its holder and its kind (a read-write holder may hold both sides).
pub(crate) type HoldKey = (Arc<str>, LockKind);

/// One request for the lock.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub holder: Arc<str>,
    pub kind: LockKind,
    pub lease: Option<Duration>,
    pub wait: Wait,
}

/// The settings the rules depend on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    /// The lease of a hold taken without one, renewed by the watchdog.
    pub watchdog_timeout: Duration,
    /// A fair waiter's queue place is kept this long after its turn, when it gave no wait.
    pub fair_wait_timeout: Duration,
    /// The longest wait lockman gives its own fair places (`Config::fair_lock_place_timeout`):
    /// refreshed every third of it while their waiters live.
    pub fair_place_timeout: Duration,
    /// Whether a release may hand the lock to a local waiter (see `release_op`).
    pub hand_off: bool,
}

/// `recent_leaves` is swept of expired leaves when it reaches this size, then at twice what is
/// left.
const RECENT_LEAVES_MIN: usize = 64;

/// The longest lease accepted: PEXPIRE must not overflow.
pub(crate) const MAX_LEASE: Duration = crate::config::MAX_EXPIRY;

/// The state of one lock name in this process.
#[derive(Debug)]
pub(crate) struct LockState {
    family: LockKind,
    name: Arc<str>,
    /// The lock's unlock channel (a fair waiter's own channel derives from it).
    channel: Arc<str>,
    settings: Settings,
    holds: FxHashMap<HoldKey, Hold>,
    waiters: Waiters,
    todo: VecDeque<Pending>,
    flight: Option<Flight>,
    /// The acquire, release or hand-off under way, kept to be sent again should its reply never
    /// come.
    sent: Option<Op>,
    /// Requests whose reply never came, by number ([`Op::seq`]), until Redis answers one of
    /// their resends.
    unsure: FxHashMap<u64, Unsure>,
    /// The last request number given.
    seq: u64,
    /// Holders whose count in Redis may be above what this actor grants (a request given up
    /// unresolved, a lease ended here a little before Redis's copy): settled by count once none
    /// of their requests is unresolved; they take nothing new until then.
    abandoned: FxHashSet<HoldKey>,
    /// Releases and settlings held back behind an unresolved request of their holder.
    held_back: Vec<Pending>,
    /// Consecutive retryable errors, for the backoff; reset by any answer from Redis.
    failures: u32,
    retry_armed: bool,
    track_armed: bool,
    /// Fair lock: the places' refresh is armed (while `places` is not empty).
    refresh_armed: bool,
    /// The channels routed here: while a waiter needs them.
    subscribed: FxHashSet<Arc<str>>,
    /// Fair lock: the holders this actor may have a place for in the Redis queue, each with the
    /// wait its place was made with. Fixed at the holder's first queued attempt and used by all
    /// its requests (come-back, grant, leave), so that what a grant or a leave takes off the
    /// deadlines behind is what the place added. A place is left when its holder's last waiter
    /// ends without the lock, whichever of its waiters queued it. The wait is the manager's,
    /// `min(fair_wait_timeout, fair_place_timeout)`, the same for every waiter, never a caller's
    /// own wait: a place outlives the waiter that made it whenever a clone of the handle still
    /// waits, and must serve that clone as well (a place made with a 1 s wait, 1 s behind a
    /// dead place ahead, would expire within a refresh period of it, and the clone would queue
    /// again at the tail). A caller's short wait costs nothing there: it leaves when it gives
    /// up, and its leave takes off what its place added.
    places: FxHashMap<Arc<str>, Duration>,
    /// Fair lock: places whose leave failed or went unanswered, sent again until they would have
    /// expired (see `Leaving`).
    leaving: FxHashMap<Arc<str>, Leaving>,
    /// Fair lock: leaves that ran, with their wait and when, kept while the place they removed
    /// could have come back and still be alive (a failover to a replica that missed the leave):
    /// sent again, idempotently, when the pub/sub connection comes back (see `resubscribed`).
    recent_leaves: FxHashMap<Arc<str>, (Duration, Instant)>,
    /// The size of `recent_leaves` at which its expired leaves are dropped next (amortized).
    recent_leaves_cap: usize,
    /// Waiters still to try after a wake-all message, oldest first (one attempt at a time).
    pending_wakes: VecDeque<WaiterId>,
    /// Local hand-offs since the last release that published.
    streak: u32,
    phase: Phase,
    busy: bool,
    next_waiter: WaiterId,
    now: Instant,
    out: Vec<Effect>,
}

impl LockState {
    pub(crate) fn new(family: LockKind, name: Arc<str>, settings: Settings, now: Instant) -> Self {
        Self {
            family,
            channel: family.channel(&name).into(),
            name,
            settings,
            holds: FxHashMap::default(),
            waiters: Waiters::default(),
            todo: VecDeque::new(),
            flight: None,
            sent: None,
            unsure: FxHashMap::default(),
            seq: 0,
            abandoned: FxHashSet::default(),
            held_back: Vec::new(),
            failures: 0,
            retry_armed: false,
            track_armed: false,
            refresh_armed: false,
            subscribed: FxHashSet::default(),
            places: FxHashMap::default(),
            leaving: FxHashMap::default(),
            recent_leaves: FxHashMap::default(),
            recent_leaves_cap: RECENT_LEAVES_MIN,
            pending_wakes: VecDeque::new(),
            streak: 0,
            phase: Phase::Running,
            busy: false,
            next_waiter: 0,
            now,
            out: Vec::new(),
        }
    }

    /// The effects produced since the last call, in order.
    #[cfg(test)]
    pub(crate) fn drain(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.out)
    }

    /// Moves the effects produced since the last call, in order, to the end of `into`.
    pub(crate) fn drain_into(&mut self, into: &mut Vec<Effect>) {
        into.append(&mut self.out);
    }

    /// Whether waiter `id` is still waiting.
    pub(crate) fn is_waiting(&self, id: WaiterId) -> bool {
        self.waiters.contains(id)
    }

    // ----- events -------------------------------------------------------------------------

    /// A new request. Returns its waiter id; its answer may already be among the effects.
    pub(crate) fn request(&mut self, req: Request, now: Instant) -> WaiterId {
        self.now = now;
        self.next_waiter += 1;
        let id = self.next_waiter;
        if self.phase != Phase::Running {
            self.out
                .push(Effect::Answer(id, Answer::Failed(LockError::Shutdown)));
            return id;
        }
        if let Err(e) = validate(&req, self.family) {
            self.out.push(Effect::Answer(id, Answer::Failed(e)));
            return id;
        }
        let wait = req.wait.normalized();
        if let Wait::Up(d) = wait {
            self.out.push(Effect::Arm(Timer::Deadline(id), d));
        }
        self.waiters.push(Waiter {
            id,
            holder: req.holder,
            kind: req.kind,
            lease: req.lease,
            wait,
            since: now,
            watched: false,
        });
        self.set_busy();
        if self.joins_queue(id) {
            // Its turn comes at a wake-up, like the waiters ahead of it; the subscription is
            // theirs already (subscribing again changes nothing).
            self.subscribe(id);
        } else {
            self.attempt(id);
            if !matches!(self.flight, Some(Flight::Attempt { id: f, .. }) if f == id) {
                // Queued behind another round trip: it waits from now on.
                self.watch_caller(id);
            }
        }
        id
    }

    /// A guard's hold is to be released; `reply` gets the outcome.
    pub(crate) fn release(
        &mut self,
        key: HoldKey,
        epoch: u64,
        reply: Option<ReplyId>,
        now: Instant,
    ) {
        self.now = now;
        self.todo.push_back(Pending::Release { key, epoch, reply });
        self.pump();
    }

    /// The round trip under way finished.
    pub(crate) fn ran(&mut self, outcome: Outcome, now: Instant) {
        self.now = now;
        let sent = self.sent.take();
        let Some(flight) = self.flight.take() else {
            return;
        };
        let resolved = match sent {
            Some(op) if outcome.unknown().is_some() => {
                let (Outcome::Acquire(Err(e)) | Outcome::Release(Err(e))) = outcome else {
                    return;
                };
                self.unresolved(op, flight, e);
                self.maybe_idle();
                self.pump();
                return;
            }
            other => other,
        };
        self.apply_outcome(flight, outcome);
        // After the outcome: what its holder's requests held back meanwhile needs its effect.
        if let Some(op) = resolved {
            self.resolved(&op);
        }
        self.maybe_idle();
        self.pump();
    }

    fn apply_outcome(&mut self, flight: Flight, outcome: Outcome) {
        match (flight, outcome) {
            (
                Flight::Attempt {
                    id,
                    key,
                    lease,
                    started,
                    place,
                },
                Outcome::Acquire(res),
            ) => {
                self.attempted(id, key, lease, started, place, res);
                self.next_wake();
            }
            (Flight::Release(release), Outcome::Release(res)) => self.released(release, res),
            (Flight::Settle { key }, Outcome::Settle(res)) => match res {
                Ok(0) => self.settled(&key),
                Ok(left) => {
                    tracing::warn!(lock = %self.name, left, "could not settle a holder's count yet");
                    self.out
                        .push(Effect::Arm(Timer::Settle(key), ERROR_BACKOFF_MAX));
                }
                Err(error) => {
                    tracing::warn!(lock = %self.name, %error, "could not settle a holder's count yet");
                    self.out
                        .push(Effect::Arm(Timer::Settle(key), ERROR_BACKOFF_MAX));
                }
            },
            (Flight::SettleHold { key, epoch }, Outcome::Settle(res)) => {
                self.hold_settled(key, epoch, res)
            }
            (Flight::Leave { holder, wait, then }, Outcome::LeaveQueue(res)) => {
                self.left(holder, wait, res);
                if let Some((id, answer)) = then {
                    self.out.push(Effect::Answer(id, answer));
                }
            }
            (Flight::Refresh, Outcome::FairRefresh(res)) => self.refreshed(res),
            (Flight::Shutdown, Outcome::Shutdown) => {
                // Nothing runs any more: releases asked for meanwhile fail (`pump`).
                self.phase = Phase::Stopped;
                self.out.push(Effect::Stopped);
            }
            (flight, outcome) => {
                tracing::error!(lock = %self.name, ?flight, ?outcome, "a round trip's outcome does not match it");
            }
        }
    }

    /// An unlock message on `channel`: wake every waiter (`all`, a write release) or one.
    pub(crate) fn unlocked(&mut self, all: bool, channel: &str, now: Instant) {
        self.now = now;
        if all {
            self.wake_all();
        } else {
            self.wake_channel(channel);
        }
    }

    /// The pub/sub connection came back: messages may have been lost, and (a failover's sign)
    /// leaves that ran on the old primary may have been lost with it.
    pub(crate) fn resubscribed(&mut self, now: Instant) {
        self.now = now;
        // Fair-lock waiters each have their own turn, and any of their messages may be lost.
        if self.family.is_fair() {
            self.leave_again();
            self.wake_all();
        } else {
            self.wake_one();
        }
    }

    /// A subscription asked for took effect (or failed): try once more, since a release
    /// published before it took effect would otherwise go unseen.
    pub(crate) fn subscribed(&mut self, channel: &str, ok: bool, now: Instant) {
        self.now = now;
        if !ok {
            tracing::warn!(lock = %self.name, "subscribe failed; waiting on the TTL");
        }
        if self.subscribed.contains(channel) {
            self.wake_channel(channel);
        }
    }

    /// The Watchdog found a hold gone, or could not renew it within the watchdog timeout.
    pub(crate) fn hold_lost(&mut self, key: &HoldKey, epoch: u64, now: Instant) {
        self.now = now;
        self.lose(key, epoch, Loss::Watchdog);
        // A settle its end queued (its holder's count was being settled) goes now.
        self.pump();
    }

    /// A timer armed earlier fired.
    pub(crate) fn fired(&mut self, timer: Timer, now: Instant) {
        self.now = now;
        match timer {
            Timer::Deadline(id) => self.give_up(id, "its wait ran out"),
            Timer::Retry => {
                self.retry_armed = false;
                if self.family.is_fair() {
                    // Each fair waiter has its own place, and the head of the Redis queue need
                    // not be the oldest local waiter: every one of them tries.
                    self.wake_all();
                } else {
                    self.wake_one();
                }
            }
            Timer::Track => {
                self.track_armed = false;
                self.track_due();
            }
            Timer::Expiry(key, epoch) => {
                // Told lost from when the lease, counted from the request, ends; Redis's copy
                // began when the script ran, a little later, and may still count: settled
                // before the holder takes it again, so that it is not counted twice.
                if self.hold_mut(&key, epoch).is_some() {
                    self.lose(&key, epoch, Loss::Lease);
                    self.abandoned.insert(key.clone());
                    self.todo.push_back(Pending::Settle { key });
                    self.pump();
                }
            }
            Timer::Settle(key) => {
                if self.abandoned.contains(&key) {
                    self.todo.push_back(Pending::Settle { key });
                    self.pump();
                }
            }
            Timer::Resend(id) => self.resend(id),
            Timer::Refresh => {
                self.refresh_armed = false;
                if !self.places.is_empty() {
                    self.todo.push_back(Pending::Refresh);
                    self.arm_refresh();
                    self.pump();
                }
            }
            Timer::Leave(holder) => {
                if let Some(leaving) = self.leaving.get(&holder) {
                    let wait = leaving.wait;
                    self.todo.push_front(Pending::Leave {
                        holder,
                        wait,
                        then: None,
                    });
                    self.pump();
                }
            }
            Timer::SettleHold(key, epoch) => {
                if let Some(hold) = self.hold_mut(&key, epoch) {
                    hold.settle_armed = false;
                    self.todo.push_back(Pending::SettleHold { key, epoch });
                    self.pump();
                }
            }
        }
    }

    /// Waiter `id`'s caller went away: it leaves the queue.
    pub(crate) fn caller_gone(&mut self, id: WaiterId, now: Instant) {
        self.now = now;
        self.give_up(id, "its caller went away");
    }

    /// Stop: fail every waiter with `Shutdown` (fair waiters leave the Redis queue) and, when
    /// `release`, release every hold as often as it was taken. Ends with [`Effect::Stopped`].
    pub(crate) fn stop(&mut self, release: bool, now: Instant) {
        self.now = now;
        self.phase = Phase::Stopping;
        self.todo.push_back(Pending::Shutdown { release });
        self.pump();
    }

    /// The actor is gone: everything it still had ends here (waiters fail, subscriptions and
    /// renewals go).
    pub(crate) fn abandon(&mut self) {
        // Too late to leave fair queues: those places expire.
        self.fail_waiters();
        for (key, hold) in std::mem::take(&mut self.holds) {
            if hold.tracked {
                self.out.push(Effect::Untrack {
                    hold: key,
                    epoch: hold.epoch,
                });
            }
        }
    }
}

fn not_held(name: &str, (holder, kind): &HoldKey) -> LockError {
    LockError::NotHeld {
        name: name.to_string(),
        holder: kind.field(holder),
    }
}

fn validate(req: &Request, family: LockKind) -> Result<(), LockError> {
    if req.holder.is_empty() {
        return Err(LockError::invalid("holder", "must not be empty"));
    }
    if req.kind.family() != family {
        let why = format!(
            "a {:?} request sent to the actor of a {family:?} lock",
            req.kind
        );
        return Err(LockError::invalid("kind", why));
    }
    match req.lease {
        Some(lease) if lease < Duration::from_millis(1) => Err(LockError::invalid(
            "lease",
            format!("{lease:?} is below 1 ms"),
        )),
        Some(lease) if lease > MAX_LEASE => Err(LockError::invalid(
            "lease",
            format!("{lease:?} is above {MAX_LEASE:?}"),
        )),
        _ => Ok(()),
    }
}
