//! The rules of one lock name, as a state machine with no actix, no timers and no Redis: events
//! go in (a request, a script's reply, an unlock message, a timer, a caller gone), and the
//! [`Effect`]s to carry out come out, in order. The per-name shell (`actors::shell`) drives it
//! and carries its effects out; the [`LockActor`](super::LockActor) runs its round trips.
//!
//! What it guarantees (and `tests/` checks: unit tests in `tests/mod.rs` and beside them by
//! subject, random event sequences in `property.rs`, a model of Redis's side in `model.rs`, the
//! fair queue's places in `fair_places.rs`, the seeded simulation of several managers in
//! `simulation.rs`):
//! - one round trip at a time: attempts and releases of one name never interleave;
//! - every waiter is answered exactly once, and never while it still counts as waiting;
//! - a subscribed channel always has a waiter that needs it;
//! - never two local holds of an exclusive kind; hold counts never go below one;
//! - a grant nobody takes any more is released, never leaked;
//! - fair lock: when nothing is under way, each place of this actor's holders in the Redis queue
//!   has a local waiter, or its failed leave is being sent again (`places`, `leaving`).
//!
//! The state is made of rooms, each with its own invariant: the waiters with the streak of
//! hand-offs (`waiters.rs`), the holds with those found gone while releasing (`holds.rs`), the
//! fair-queue places with their leave rules (`places.rs`), the round trips (`trips.rs`), the
//! link to Redis: what the name heard of it, its last tries, the attempts' failures and the
//! channels routed here (`link.rs`), and the timers, one table of instants for all but the waiters' deadlines
//! (`timers.rs`; the shell keeps one timer for its next instant and calls
//! [`NameState::timeout`]). The rules that join them are `impl LockState` blocks by subject:
//! sending (`round_trips.rs`), outcomes (`outcomes.rs`), settling a holder's count
//! (`settle.rs`), requests of unknown outcome (`unsure.rs`), waking waiters (`wake.rs`), Redis
//! away (`outage.rs`), turns after a streak of hand-offs (`turns.rs`), and the uncontended
//! pair's short path through them (`short.rs`).

mod effects;
mod holds;
mod link;
mod outage;
mod outcomes;
mod places;
mod round_trips;
mod settle;
mod short;
#[cfg(test)]
mod tests;
mod timers;
mod trips;
mod turns;
mod unsure;
mod waiters;
mod wake;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::LAST_TRY_GRACE;
pub(crate) use effects::{Answer, Effect, Locks, Loss, Op, Outcome, Timer, shutdown_retry};
use holds::Holds;
pub(crate) use holds::TRACK_AFTER;
#[cfg(test)]
use holds::WATCHED_AFTER;
use link::Link;

use places::FairPlaces;
use timers::{SpinSleeps, Timers};
use trips::{InFlight, Pending, Trips};
use waiters::{Waiter, Waiters};

pub(crate) use crate::actors::name::{MAX_HAND_OFF_STREAK, Phase, Wait, WaiterId, backoff};
use crate::actors::name::{Renewal, state::NameState};
use crate::config::{Config, SpinBackOff};
use crate::error::LockError;
use crate::protocol::{Attempt, FairArgs, HandedOff, LockKind, Refreshed, Released, keys};

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
    /// How long Redis may be away during a wait before the wait fails (`outage.rs`).
    pub unavailable_after: Duration,
    /// Whether the Watchdog watches holds (`Config::watch_holds`): a watchdog hold is then
    /// handed to it [`WATCHED_AFTER`] after its grant, not a sixth of the timeout, so that its
    /// loss is known at once almost from the start (it still renews it only once it has lived a
    /// sixth of the timeout).
    pub watch_holds: bool,
    /// How a spin lock's waiters space their attempts (`Config::spin_backoff`).
    pub spin_backoff: SpinBackOff,
    /// How long a round trip may be under way at a waiter's deadline before Redis counts as
    /// not answering ([`Config::last_try_grace`]: with replica sync every attempt waits for the
    /// replicas, and a slow acknowledgement within the sync timeout is no outage).
    pub last_try_grace: Duration,
}

impl Settings {
    /// The settings `config` gives.
    pub(crate) fn of(config: &Config) -> Self {
        Self {
            watchdog_timeout: config.get_watchdog_timeout(),
            fair_wait_timeout: config.get_fair_lock_wait_timeout(),
            fair_place_timeout: config.get_fair_lock_place_timeout(),
            // A hand-off grants without an acquire, so without the acquire's replica sync.
            hand_off: config.get_sync_replicas().is_none(),
            unavailable_after: config.get_unavailable_after(),
            watch_holds: config.get_watch_holds(),
            spin_backoff: config.get_spin_backoff(),
            last_try_grace: config.last_try_grace(),
        }
    }
}

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
    holds: Holds,
    waiters: Waiters,
    /// Fair lock: this actor's places in the Redis queue.
    fair: FairPlaces,
    trips: Trips,
    timers: Timers,
    /// Whether a spin lock's long hold-backs find takers (`turns`).
    spin_turns: turns::SpinTurns,
    /// What it heard of Redis, and the channels routed here.
    link: Link,
    phase: Phase,
    busy: bool,
    now: Instant,
    out: Vec<Effect>,
    /// Tests only: the short path (`short.rs`) is never taken, so that the general rules can
    /// be compared with it.
    #[cfg(test)]
    general_only: bool,
    /// Tests only: the steps that took the short path.
    #[cfg(test)]
    shorts: u32,
}

impl LockState {
    pub(crate) fn new(family: LockKind, name: Arc<str>, settings: Settings, now: Instant) -> Self {
        Self {
            family,
            channel: family.channel(&name).into(),
            name,
            settings,
            holds: Holds::default(),
            waiters: Waiters::default(),
            fair: FairPlaces::default(),
            trips: Trips::default(),
            timers: Timers::default(),
            spin_turns: turns::SpinTurns::default(),
            link: Link::default(),
            phase: Phase::Running,
            busy: false,
            now,
            out: Vec::new(),
            #[cfg(test)]
            general_only: false,
            #[cfg(test)]
            shorts: 0,
        }
    }

    /// The effects produced since the last call, in order.
    #[cfg(test)]
    pub(crate) fn drain(&mut self) -> Vec<Effect> {
        self.update_busy();
        std::mem::take(&mut self.out)
    }

    /// Moves the effects produced since the last call, in order, to the end of `into`, the
    /// last of them whether the actor is busy (`Effect::Busy`, `Effect::Idle`) when that
    /// changed.
    pub(crate) fn drain_into(&mut self, into: &mut Vec<Effect>) {
        self.update_busy();
        if into.is_empty() {
            // The shell's buffer is empty at each event: the two swap, with no copy of the
            // effects (both keep their capacity, so neither allocates again).
            std::mem::swap(into, &mut self.out);
        } else {
            into.append(&mut self.out);
        }
    }

    /// Whether waiter `id` is still waiting.
    pub(crate) fn is_waiting(&self, id: WaiterId) -> bool {
        self.waiters.contains(id)
    }

    // ----- events -------------------------------------------------------------------------

    /// A new request. Returns its waiter id; its answer may already be among the effects.
    pub(crate) fn request(&mut self, req: Request, now: Instant) -> WaiterId {
        self.now = now;
        let id = self.waiters.next_id();
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
        if self.idle_for(req.kind) {
            self.request_short(id, req, wait, now);
            return id;
        }
        if let Wait::Up(d) = wait {
            self.out.push(Effect::Arm(id, d));
        }
        // A spin waiter's sleeps between attempts, its jitter seeded by its holder (a client id
        // each process draws) and its id.
        let spin = req.kind.spins().then(|| {
            use std::hash::BuildHasher as _;
            let seed = rustc_hash::FxBuildHasher.hash_one((&*req.holder, id));
            SpinSleeps::new(self.settings.spin_backoff, seed)
        });
        self.waiters.push(Waiter {
            id,
            spin,
            holder: req.holder,
            kind: req.kind,
            lease: req.lease,
            wait,
            since: now,
            watched: false,
            last_try: false,
        });
        self.set_busy();
        if self.link.outage().is_away() && !self.timers.is_armed(&Timer::Unavailable) {
            // Redis is away already: this wait too ends once it has been for the bound.
            self.arm_unavailable();
        }
        if self.joins_queue(id) {
            // Its turn comes at a wake-up, like the waiters ahead of it; the subscription is
            // theirs already (subscribing again changes nothing).
            self.subscribe(id);
        } else {
            self.attempt(id);
            if self.trips.attempting() != Some(id) {
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
        if let Err((key, reply)) = self.release_short(key, epoch, reply) {
            self.trips.queue(Pending::Release { key, epoch, reply });
            self.pump();
        }
    }

    /// The round trip under way finished.
    pub(crate) fn ran(&mut self, outcome: Outcome, now: Instant) {
        self.now = now;
        let Some(InFlight { flight, sent, at }) = self.trips.landed() else {
            return;
        };
        if self.lands_short(&flight, &outcome) {
            return self.land_short(flight, outcome);
        }
        self.heard(&outcome, at);
        // The request as sent, made again only when its reply never came, or when it resolves
        // an unsure request (a resend's reply).
        let resolved = match sent {
            Some(sent) if outcome.unknown().is_some() => {
                let (Outcome::Acquire(Err(e)) | Outcome::Release(Err(e))) = outcome else {
                    return;
                };
                if let Some(op) = sent.op(&flight) {
                    self.unresolved(op, flight, e);
                }
                self.pump();
                return;
            }
            Some(sent) if self.trips.unsure(sent.seq()).is_some() => sent.op(&flight),
            _ => None,
        };
        self.apply_outcome(flight, outcome);
        self.gone_after_release();
        // After the outcome: what its holder's requests held back meanwhile needs its effect.
        if let Some(op) = resolved {
            self.resolved(&op);
        }
        self.pump();
        self.decide_last_tries();
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
        if self.link.is_subscribed(channel) {
            self.wake_channel(channel);
        }
    }

    /// The Watchdog found a hold gone, or could not renew it within the watchdog timeout.
    ///
    /// While the hold's last release is under way (or unresolved) the key may be gone by that
    /// release (a hold watched 20 ms after its grant may be released while its first check
    /// returns): no loss then; the release's outcome decides (`NotHeld` is a loss, found by the
    /// release), and a hold that outlives it is lost after all, since the Watchdog has let it go.
    pub(crate) fn hold_lost(&mut self, key: &HoldKey, epoch: u64, now: Instant) {
        self.now = now;
        // Only the hold's last release can have taken its key away: with more grants of it
        // alive here, the key was another's doing.
        let last = self.holds.of(key, epoch).is_some_and(|h| h.count == 1);
        if last && self.trips.release_sent(key, epoch) {
            self.holds.gone_releasing(key.clone(), epoch);
            return;
        }
        self.lose(key, epoch, Loss::Watchdog);
        // A settle its end queued (its holder's count was being settled) goes now.
        self.pump();
    }

    /// The holds found gone while their release was under way, once it is not: those still
    /// here (the release failed, or left other holds of them) are lost.
    fn gone_after_release(&mut self) {
        let trips = &self.trips;
        let gone = (self.holds).gone_released(|key, epoch| trips.release_sent(key, epoch));
        for (key, epoch) in gone {
            self.lose(&key, epoch, Loss::Watchdog);
        }
    }

    /// `timer` fired (a deadline, through the shell; any other, through
    /// [`NameState::timeout`]): it is armed no more.
    pub(crate) fn fired(&mut self, timer: Timer, now: Instant) {
        self.now = now;
        self.timers.stop(&timer);
        match timer {
            Timer::Deadline(id) => self.deadline(id),
            Timer::Unavailable => self.unavailable_due(),
            Timer::Verdict => self.verdict_due(),
            Timer::Retry => {
                if self.family.is_fair() {
                    // Each fair waiter has its own place, and the head of the Redis queue need
                    // not be the oldest local waiter: every one of them tries.
                    self.wake_all();
                } else {
                    self.wake_one();
                }
            }
            Timer::Track => self.track_due(),
            Timer::Expiry(key, epoch) => {
                // Told lost from when the lease, counted from the request, ends; Redis's copy
                // began when the script ran, a little later, and may still count: settled
                // before the holder takes it again, so that it is not counted twice.
                if self.holds.of(&key, epoch).is_some() {
                    self.lose(&key, epoch, Loss::Lease);
                    self.trips.lapse(&key);
                    self.settle(key);
                    self.pump();
                }
            }
            Timer::Settle(key) => {
                if self.settle_due(&key) {
                    self.settle(key);
                    self.pump();
                }
            }
            Timer::Resend(id) => self.resend(id),
            Timer::Turn => self.turn_over(),
            Timer::Refresh => {
                if self.fair.has_places() {
                    self.trips.queue(Pending::Refresh);
                    self.arm_refresh();
                    self.pump();
                }
            }
            Timer::Leave(holder) => {
                if let Some(wait) = self.fair.leave_wait(&holder) {
                    self.trips.queue_first(Pending::Leave { holder, wait });
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
        self.trips.queue(Pending::Shutdown { release });
        self.pump();
    }

    /// The actor is gone: everything it still had ends here (waiters fail, subscriptions and
    /// renewals go).
    pub(crate) fn abandon(&mut self) {
        // Too late to leave fair queues: those places expire.
        self.fail_waiters();
        for (key, hold) in self.holds.take_all() {
            if hold.tracked {
                self.out.push(Effect::Untrack {
                    hold: key,
                    epoch: hold.epoch,
                });
            }
        }
    }
}

/// The events the shell drives: most are the state's own methods above; the rest read the
/// shell's reports in a lock's terms.
impl NameState for LockState {
    type Family = Locks;
    type Timer = Timer;

    fn drain_into(&mut self, out: &mut Vec<Effect>) {
        LockState::drain_into(self, out);
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
        LockState::fired(self, timer, now);
    }

    fn subscribed(&mut self, channel: &str, ok: bool, now: Instant) {
        LockState::subscribed(self, channel, ok, now);
    }

    fn message(&mut self, channel: &str, count: Option<i64>, now: Instant) {
        self.unlocked(keys::wakes_all(count), channel, now);
    }

    fn pubsub(&mut self, lost: Option<LockError>, now: Instant) {
        match lost {
            Some(why) => self.connection_lost(why, now),
            None => self.resubscribed(now),
        }
    }

    fn renewal_lost(&mut self, holder: Arc<str>, what: Renewal, epoch: u64, now: Instant) {
        if let Renewal::Lock(kind) = what {
            self.hold_lost(&(holder, kind), epoch, now);
        }
    }

    fn caller_left(&mut self, id: WaiterId, now: Instant) -> bool {
        if !self.is_waiting(id) {
            // Answered soon (a fair waiter leaving the queue): its answer finds nobody.
            return false;
        }
        self.caller_gone(id, now);
        true
    }

    fn stop(&mut self, release: bool, now: Instant) {
        LockState::stop(self, release, now);
    }

    fn retire(&mut self) {
        LockState::retire(self);
    }

    fn abandon(&mut self) {
        LockState::abandon(self);
    }

    fn outcome(&self, answer: &Answer) -> &'static str {
        match answer {
            Answer::Granted { .. } => "acquired",
            Answer::TimedOut => "timed_out",
            Answer::Failed(LockError::Unavailable { .. }) => "unavailable",
            Answer::Failed(_) => "failed",
        }
    }

    fn renewal(&self, (holder, kind): &HoldKey) -> (Arc<str>, Renewal) {
        (holder.clone(), Renewal::Lock(*kind))
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
