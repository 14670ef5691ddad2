//! The rules of one lock name, as a state machine with no actix, no timers and no Redis: events
//! go in (a request, a script's reply, an unlock message, a timer, a caller gone), and the
//! [`Effect`]s to carry out come out, in order. The [`LockActor`](super::LockActor) is its shell.
//!
//! What it guarantees (and `tests.rs` checks, also over random event sequences):
//! - one round trip at a time: attempts and releases of one name never interleave;
//! - every waiter is answered exactly once, and never while it still counts as waiting;
//! - a subscribed channel always has a waiter that needs it;
//! - never two local holds of an exclusive kind; hold counts never go below one;
//! - a grant nobody takes any more is released, never leaked.

mod effects;
mod holds;
#[cfg(test)]
mod tests;
mod waiters;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::{FxHashMap, FxHashSet};

pub(crate) use effects::{Answer, Effect, Op, Outcome, Timer};
use holds::Hold;
use waiters::{Waiter, Waiters};

use crate::error::LockError;
use crate::scripts::{Attempt, FairArgs, HandedOff, LockKind, Released};

/// A waiter's number, unique within its lock actor.
pub(crate) type WaiterId = u64;
/// A release request's number, chosen by the shell.
pub(crate) type ReplyId = u64;
/// A hold's identity: its holder and its kind (a read-write holder may hold both sides).
pub(crate) type HoldKey = (Arc<str>, LockKind);

/// How long an [`Acquire`](crate::Acquire) may wait while the lock is held by someone else.
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
    /// Whether a release may hand the lock to a local waiter (see `release_op`).
    pub hand_off: bool,
}

/// The longest lease accepted (about 285 years): PEXPIRE must not overflow.
pub(crate) const MAX_LEASE: Duration = Duration::from_millis(1 << 53);

/// How many local hand-offs may follow each other: when a release frees a lock that a waiter of
/// the same manager waits for, one script releases it and grants it to that waiter, with no
/// unlock message. After this many in a row, the next release publishes as usual, so that
/// waiters in other processes (woken only by the message) get their chance.
pub const MAX_HAND_OFF_STREAK: u32 = 8;

/// Retry delays after a retryable Redis error, for a waiter that may still wait.
const ERROR_BACKOFF_MIN: Duration = Duration::from_millis(50);
const ERROR_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// A round trip waiting its turn.
#[derive(Debug)]
enum Pending {
    Attempt(WaiterId),
    Release {
        key: HoldKey,
        epoch: u64,
        reply: Option<ReplyId>,
    },
    /// Take back what an acquire of unknown outcome may have taken.
    Undo {
        key: HoldKey,
        lease: Duration,
    },
    Reconcile {
        key: HoldKey,
        epoch: u64,
    },
    /// Leave the fair queue, then answer the waiter (if any) that gave up.
    Leave {
        holder: Arc<str>,
        wait: Duration,
        then: Option<(WaiterId, Answer)>,
    },
    Shutdown {
        release: bool,
    },
}

/// The round trip under way, with what its outcome needs.
#[derive(Debug)]
enum Flight {
    Attempt {
        id: WaiterId,
        key: HoldKey,
        lease: Option<Duration>,
        started: Instant,
    },
    Release {
        key: HoldKey,
        epoch: u64,
        lease: Duration,
        reply: Option<ReplyId>,
        started: Instant,
        /// A hand-off: the waiter and its lease.
        to: Option<(WaiterId, HoldKey, Option<Duration>)>,
    },
    Undo,
    Reconcile {
        key: HoldKey,
        epoch: u64,
    },
    Leave {
        then: Option<(WaiterId, Answer)>,
    },
    Shutdown,
}

/// The state of one lock name in this process.
#[derive(Debug)]
pub(crate) struct LockState {
    family: LockKind,
    name: Arc<str>,
    settings: Settings,
    holds: FxHashMap<HoldKey, Hold>,
    waiters: Waiters,
    todo: VecDeque<Pending>,
    flight: Option<Flight>,
    /// Consecutive retryable errors, for the backoff; reset by any answer from Redis.
    failures: u32,
    retry_armed: bool,
    track_armed: bool,
    /// The channels routed here: while a waiter needs them.
    subscribed: FxHashSet<Arc<str>>,
    /// Waiters still to try after a wake-all message, oldest first (one attempt at a time).
    pending_wakes: VecDeque<WaiterId>,
    /// Local hand-offs since the last release that published.
    streak: u32,
    stopping: bool,
    busy: bool,
    next_waiter: WaiterId,
    now: Instant,
    out: Vec<Effect>,
}

impl LockState {
    pub(crate) fn new(family: LockKind, name: Arc<str>, settings: Settings, now: Instant) -> Self {
        Self {
            family,
            name,
            settings,
            holds: FxHashMap::default(),
            waiters: Waiters::default(),
            todo: VecDeque::new(),
            flight: None,
            failures: 0,
            retry_armed: false,
            track_armed: false,
            subscribed: FxHashSet::default(),
            pending_wakes: VecDeque::new(),
            streak: 0,
            stopping: false,
            busy: false,
            next_waiter: 0,
            now,
            out: Vec::new(),
        }
    }

    /// The effects produced since the last call, in order.
    pub(crate) fn drain(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.out)
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
        if self.stopping {
            self.out
                .push(Effect::Answer(id, Answer::Failed(LockError::Shutdown)));
            return id;
        }
        if let Err(e) = validate(&req, self.family) {
            self.out.push(Effect::Answer(id, Answer::Failed(e)));
            return id;
        }
        let wait = match req.wait {
            Wait::Up(d) if d.is_zero() => Wait::No,
            other => other,
        };
        if let Wait::Up(d) = wait {
            self.out.push(Effect::Arm(Timer::Deadline(id), d));
        }
        let channel = req.kind.waiter_channel(&self.name, &req.holder).into();
        self.waiters.push(Waiter {
            id,
            holder: req.holder,
            kind: req.kind,
            lease: req.lease,
            wait,
            since: now,
            channel,
            fair_wait: match wait {
                Wait::Up(d) => d,
                _ => self.settings.fair_wait_timeout,
            },
            queued: false,
        });
        self.set_busy();
        if self.joins_queue(id) {
            // Its turn comes at a wake-up, like the waiters ahead of it; the subscription is
            // theirs already (subscribing again changes nothing).
            self.subscribe(id);
        } else {
            self.attempt(id);
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
        let Some(flight) = self.flight.take() else {
            return;
        };
        match (flight, outcome) {
            (
                Flight::Attempt {
                    id,
                    key,
                    lease,
                    started,
                },
                Outcome::Acquire(res),
            ) => {
                self.attempted(id, key, lease, started, res);
                self.next_wake();
            }
            (
                Flight::Release {
                    key,
                    epoch,
                    lease,
                    reply,
                    started,
                    to,
                },
                Outcome::Release(res),
            ) => self.released(
                key,
                epoch,
                lease,
                reply,
                started,
                res.map(HandedOff::No),
                to,
            ),
            (
                Flight::Release {
                    key,
                    epoch,
                    lease,
                    reply,
                    started,
                    to,
                },
                Outcome::HandOff(res),
            ) => self.released(key, epoch, lease, reply, started, res, to),
            (Flight::Undo, Outcome::Release(res)) => match res {
                Ok(Released::NotHeld) => {}
                Ok(_) => {
                    tracing::warn!(lock = %self.name, "released what an acquire of unknown outcome may have taken")
                }
                Err(error) => {
                    tracing::warn!(lock = %self.name, %error, "could not undo an acquire of unknown outcome; it expires after its lease")
                }
            },
            (Flight::Reconcile { key, epoch }, Outcome::Settle(res)) => {
                self.reconciled(key, epoch, res)
            }
            (Flight::Leave { then }, Outcome::LeaveQueue(res)) => {
                if let Err(error) = res {
                    tracing::warn!(lock = %self.name, %error, "could not leave the fair queue; the place expires");
                }
                if let Some((id, answer)) = then {
                    self.out.push(Effect::Answer(id, answer));
                }
            }
            (Flight::Shutdown, Outcome::Shutdown) => self.out.push(Effect::Stopped),
            (flight, outcome) => {
                tracing::error!(lock = %self.name, ?flight, ?outcome, "a round trip's outcome does not match it");
            }
        }
        self.maybe_idle();
        self.pump();
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

    /// The pub/sub connection came back: messages may have been lost.
    pub(crate) fn resubscribed(&mut self, now: Instant) {
        self.now = now;
        // Fair-lock waiters each have their own turn, and any of their messages may be lost.
        if self.family == LockKind::Fair {
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
        self.lose(key, epoch, "renewal found it gone or failed too long");
    }

    /// A timer armed earlier fired.
    pub(crate) fn fired(&mut self, timer: Timer, now: Instant) {
        self.now = now;
        match timer {
            Timer::Deadline(id) => self.give_up(id, "its wait ran out"),
            Timer::Retry => {
                self.retry_armed = false;
                self.wake_one();
            }
            Timer::Track => {
                self.track_armed = false;
                self.track_due();
            }
            Timer::Expiry(key, epoch) => self.lose(&key, epoch, "its lease ran out"),
            Timer::Reconcile(key, epoch) => {
                if let Some(hold) = self.hold_mut(&key, epoch) {
                    hold.reconcile_armed = false;
                    self.todo.push_back(Pending::Reconcile { key, epoch });
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
        self.stopping = true;
        self.todo.push_back(Pending::Shutdown { release });
        self.pump();
    }

    /// The actor is gone: everything it still had ends here (waiters fail, subscriptions and
    /// renewals go).
    pub(crate) fn abandon(&mut self) {
        for w in self.waiters.drain() {
            self.out
                .push(Effect::Answer(w.id, Answer::Failed(LockError::Shutdown)));
        }
        for channel in std::mem::take(&mut self.subscribed) {
            self.out.push(Effect::Unsubscribe(channel));
        }
        for (key, hold) in std::mem::take(&mut self.holds) {
            if hold.tracked {
                self.out.push(Effect::Untrack {
                    key,
                    epoch: hold.epoch,
                });
            }
        }
    }

    // ----- round trips --------------------------------------------------------------------

    /// Queues an attempt for waiter `id` (unless one is queued already).
    fn attempt(&mut self, id: WaiterId) {
        let queued = self
            .todo
            .iter()
            .any(|p| matches!(p, Pending::Attempt(x) if *x == id));
        if !queued {
            self.todo.push_back(Pending::Attempt(id));
        }
        self.pump();
    }

    /// Starts the next round trip, when none is under way.
    fn pump(&mut self) {
        while self.flight.is_none() {
            let Some(next) = self.todo.pop_front() else {
                return;
            };
            let (op, flight) = match next {
                Pending::Attempt(id) => match self.attempt_op(id) {
                    Some(pair) => pair,
                    None => {
                        // Its waiter left: a wake-up it was part of goes on with the next one.
                        self.next_wake();
                        continue;
                    }
                },
                Pending::Release { key, epoch, reply } => {
                    match self.release_op(key, epoch, reply) {
                        Some(pair) => pair,
                        None => continue,
                    }
                }
                Pending::Undo { key, lease } => (
                    Op::Release {
                        kind: key.1,
                        holder: key.0,
                        lease,
                    },
                    Flight::Undo,
                ),
                Pending::Reconcile { key, epoch } => {
                    let Some(hold) = self.hold_mut(&key, epoch) else {
                        continue;
                    };
                    let op = Op::Settle {
                        kind: key.1,
                        holder: key.0.clone(),
                        target: hold.count - hold.unreleased,
                        lease: hold.lease,
                    };
                    (op, Flight::Reconcile { key, epoch })
                }
                Pending::Leave { holder, wait, then } => {
                    (Op::LeaveQueue { holder, wait }, Flight::Leave { then })
                }
                Pending::Shutdown { release } => (self.shutdown_op(release), Flight::Shutdown),
            };
            self.flight = Some(flight);
            self.out.push(Effect::Run(op));
        }
    }

    fn attempt_op(&mut self, id: WaiterId) -> Option<(Op, Flight)> {
        let ttl_default = self.settings.watchdog_timeout;
        let w = self.waiters.get_mut(id)?;
        // A fair attempt that may wait can enqueue it, even one whose reply is lost: from now
        // on, giving up must leave the queue (leaving when not queued changes nothing).
        w.queued |= w.kind == LockKind::Fair && w.may_wait();
        let op = Op::Acquire {
            kind: w.kind,
            holder: w.holder.clone(),
            ttl: w.lease.unwrap_or(ttl_default),
            fair: FairArgs {
                wait: w.fair_wait,
                once: !w.may_wait(),
            },
        };
        let flight = Flight::Attempt {
            id,
            key: (w.holder.clone(), w.kind),
            lease: w.lease,
            started: self.now,
        };
        Some((op, flight))
    }

    /// A release, or a hand-off: when this release frees the lock (the last hold of its holder),
    /// the kind is exclusive and unfair, and the oldest local waiter may wait for it, one script
    /// releases and grants it to that waiter. The streak is bounded so that other processes,
    /// woken only by a publish, get their chance.
    fn release_op(
        &mut self,
        key: HoldKey,
        epoch: u64,
        reply: Option<ReplyId>,
    ) -> Option<(Op, Flight)> {
        let name = self.name.clone();
        let Some(hold) = self.holds.get_mut(&key).filter(|h| h.epoch == epoch) else {
            if let Some(reply) = reply {
                self.out
                    .push(Effect::ReleaseDone(reply, Err(not_held(&name, &key))));
            }
            return None;
        };
        if hold.unreleased > 0 {
            // Earlier releases are unconfirmed: this one joins them, reconciled in one go.
            hold.unreleased += 1;
            if let Some(reply) = reply {
                self.out.push(Effect::ReleaseDone(reply, Ok(())));
            }
            return None;
        }
        let (count, lease) = (hold.count, hold.lease);
        let to = if count == 1
            && matches!(key.1, LockKind::Reentrant | LockKind::Fenced)
            && self.settings.hand_off
            && self.streak < MAX_HAND_OFF_STREAK
            && !self.stopping
        {
            self.waiters
                .front()
                .filter(|w| w.kind == key.1 && w.may_wait() && w.holder != key.0)
                .map(|w| (w.id, (w.holder.clone(), w.kind), w.lease))
        } else {
            None
        };
        let op = match &to {
            Some((_, (to, _), to_lease)) => Op::HandOff {
                kind: key.1,
                from: key.0.clone(),
                lease,
                to: to.clone(),
                to_lease: to_lease.unwrap_or(self.settings.watchdog_timeout),
            },
            None => Op::Release {
                kind: key.1,
                holder: key.0.clone(),
                lease,
            },
        };
        let flight = Flight::Release {
            key,
            epoch,
            lease,
            reply,
            started: self.now,
            to,
        };
        Some((op, flight))
    }

    fn shutdown_op(&mut self, release: bool) -> Op {
        let mut leave: Vec<(Arc<str>, Duration)> = Vec::new();
        for w in self.waiters.drain() {
            if w.queued && !leave.iter().any(|(h, _)| *h == w.holder) {
                leave.push((w.holder.clone(), w.fair_wait));
            }
            if let Wait::Up(_) = w.wait {
                self.out.push(Effect::Cancel(Timer::Deadline(w.id)));
            }
            self.out
                .push(Effect::Answer(w.id, Answer::Failed(LockError::Shutdown)));
        }
        for channel in std::mem::take(&mut self.subscribed) {
            self.out.push(Effect::Unsubscribe(channel));
        }
        // Release each hold as often as it was taken (the hash has only this holder's field).
        let release = if release {
            self.holds
                .iter()
                .map(|(key, h)| (key.clone(), h.count, h.lease))
                .collect()
        } else {
            Vec::new()
        };
        Op::Shutdown { leave, release }
    }

    // ----- outcomes -----------------------------------------------------------------------

    fn attempted(
        &mut self,
        id: WaiterId,
        key: HoldKey,
        lease: Option<Duration>,
        started: Instant,
        res: Result<Attempt, LockError>,
    ) {
        match res {
            Ok(Attempt::Acquired { token }) => {
                self.failures = 0;
                if key.1 == LockKind::Read {
                    // Readers share: every other reader waiting here may enter too.
                    let new: Vec<WaiterId> = self
                        .waiters
                        .iter()
                        .filter(|w| w.kind == LockKind::Read && w.id != id)
                        .map(|w| w.id)
                        .filter(|id| !self.pending_wakes.contains(id))
                        .collect();
                    self.pending_wakes.extend(new);
                }
                self.granted(id, key, lease, started, token);
            }
            Ok(Attempt::Busy { ttl }) => {
                self.failures = 0;
                let Some(w) = self.waiters.get(id) else {
                    // Its caller left meanwhile. This wake-up was the others' too: they wait for
                    // the next message, or this TTL.
                    if let (false, Some(ttl)) = (self.waiters.is_empty(), ttl) {
                        self.schedule_retry(ttl);
                    }
                    return;
                };
                if !w.may_wait() {
                    return self.settle(id, Answer::TimedOut);
                }
                self.subscribe(id);
                // No TTL (a key without expiry): only the unlock message can wake us.
                if let Some(ttl) = ttl {
                    self.schedule_retry(ttl);
                }
            }
            Err(e) => {
                if e.outcome_unknown() && !self.holds.contains_key(&key) {
                    // The acquire may have gone through: one release, sent next, takes back any
                    // field this holder has (it has no other hold here).
                    let lease = lease.unwrap_or(self.settings.watchdog_timeout);
                    self.todo.push_front(Pending::Undo { key, lease });
                } else if e.outcome_unknown() {
                    // A re-entry that may have counted in Redis: settle the count.
                    self.schedule_reconcile(&key);
                }
                let Some(w) = self.waiters.get(id) else {
                    return;
                };
                if e.is_retryable() && w.may_wait() {
                    self.failures = self.failures.saturating_add(1);
                    let backoff = backoff(self.failures);
                    tracing::warn!(lock = %self.name, error = %e, ?backoff, "acquire failed, waiter retries");
                    self.subscribe(id);
                    self.schedule_retry(backoff);
                } else {
                    self.settle(id, Answer::Failed(e));
                }
            }
        }
    }

    /// Redis granted `key` for waiter `id`: record the hold and answer, or, when the waiter is
    /// gone, release it again.
    fn granted(
        &mut self,
        id: WaiterId,
        key: HoldKey,
        lease: Option<Duration>,
        started: Instant,
        token: Option<u64>,
    ) {
        let epoch = self.grant(key.clone(), lease, started);
        if let Some(w) = self.waiters.get(id) {
            let waited = started.saturating_duration_since(w.since);
            tracing::debug!(lock = %self.name, holder = %w.holder, ?waited, "acquired");
            self.settle(id, Answer::Granted { key, epoch, token });
        } else {
            self.todo.push_back(Pending::Release {
                key,
                epoch,
                reply: None,
            });
        }
        if !self.waiters.is_empty() {
            // We hold it now: the others wake at our release, or when our lease ends.
            self.schedule_retry(lease.unwrap_or(self.settings.watchdog_timeout));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn released(
        &mut self,
        key: HoldKey,
        epoch: u64,
        lease: Duration,
        reply: Option<ReplyId>,
        started: Instant,
        res: Result<HandedOff, LockError>,
        to: Option<(WaiterId, HoldKey, Option<Duration>)>,
    ) {
        let res = match res {
            Ok(HandedOff::No(Released::StillHeld)) => {
                if let Some(hold) = self.hold_mut(&key, epoch) {
                    if hold.count > 1 {
                        hold.count -= 1;
                    } else {
                        // Redis counts a hold more than we do (a re-entry of unknown outcome
                        // went through): settle down to none.
                        hold.unreleased = 1;
                        self.schedule_reconcile(&key);
                    }
                }
                self.expire_at(&key, lease, started + lease);
                Ok(())
            }
            Ok(HandedOff::No(Released::Unlocked)) => {
                self.streak = 0;
                self.end_hold(&key, epoch, false);
                // A write release that leaves its holder reading publishes nothing
                // (protocol.md): wake this process's waiters here.
                if key.1 == LockKind::Write
                    && self.holds.contains_key(&(key.0.clone(), LockKind::Read))
                {
                    self.wake_all();
                }
                Ok(())
            }
            Ok(HandedOff::No(Released::NotHeld)) => {
                self.lose(&key, epoch, "release found it gone");
                Err(not_held(&self.name, &key))
            }
            Ok(HandedOff::To { token }) => {
                self.streak += 1;
                self.end_hold(&key, epoch, false);
                if let Some((id, to_key, to_lease)) = to {
                    self.granted(id, to_key, to_lease, started, token);
                }
                Ok(())
            }
            Err(e) => {
                if let (true, Some((_, to_key, to_lease))) = (e.outcome_unknown(), &to)
                    && !self.holds.contains_key(to_key)
                {
                    let lease = to_lease.unwrap_or(self.settings.watchdog_timeout);
                    self.todo.push_front(Pending::Undo {
                        key: to_key.clone(),
                        lease,
                    });
                }
                // Did it run? Reconciliation finds out and finishes the job either way, so a
                // released (or dropped) guard never leaves a hold renewed forever.
                if let Some(hold) = self.hold_mut(&key, epoch) {
                    hold.unreleased += 1;
                    self.schedule_reconcile(&key);
                }
                Err(e)
            }
        };
        tracing::debug!(lock = %self.name, holder = %key.0, kind = ?key.1, ok = res.is_ok(), "release");
        if let Some(reply) = reply {
            self.out.push(Effect::ReleaseDone(reply, res));
        }
    }

    fn reconciled(&mut self, key: HoldKey, epoch: u64, res: Result<u32, LockError>) {
        let name = self.name.clone();
        let Some(hold) = self.hold_mut(&key, epoch) else {
            return;
        };
        let holder = &key.0;
        let target = hold.count - hold.unreleased;
        match res {
            Ok(0) if target == 0 => {
                tracing::debug!(lock = %name, %holder, "unconfirmed releases settled");
                self.end_hold(&key, epoch, false);
            }
            Ok(0) => self.lose(&key, epoch, "gone while releases were unconfirmed"),
            Ok(in_redis) if in_redis > target => {
                hold.count = in_redis;
                hold.unreleased = in_redis - target;
                hold.reconcile_failures = hold.reconcile_failures.saturating_add(1);
                self.schedule_reconcile(&key);
            }
            Ok(in_redis) => {
                hold.count = in_redis;
                hold.unreleased = 0;
                hold.reconcile_failures = 0;
                tracing::debug!(lock = %name, %holder, "unconfirmed releases settled");
            }
            Err(error) => {
                hold.reconcile_failures = hold.reconcile_failures.saturating_add(1);
                tracing::warn!(lock = %name, %holder, %error, "cannot settle releases yet");
                self.schedule_reconcile(&key);
            }
        }
    }

    // ----- waiters ------------------------------------------------------------------------

    /// Whether new waiter `id` waits its turn behind the local waiters ahead of it, without an
    /// attempt of its own. Their attempts found the lock taken and the next wake-up goes to the
    /// oldest, so an attempt now could only fail (one wasted round trip per hand-off) or barge
    /// ahead of them. Only for the exclusive, unfair kinds (a fair lock queues in Redis; readers
    /// share), for a request that may wait, and never for a holder that holds the lock here
    /// already (re-entering must not wait for itself).
    fn joins_queue(&self, id: WaiterId) -> bool {
        let Some(new) = self.waiters.get(id) else {
            return false;
        };
        matches!(new.kind, LockKind::Reentrant | LockKind::Fenced)
            && new.may_wait()
            && !self.holds.contains_key(&(new.holder.clone(), new.kind))
            && self.waiters.others_waiting(&new.holder) > 0
    }

    fn give_up(&mut self, id: WaiterId, why: &str) {
        if self.waiters.contains(id) {
            tracing::debug!(lock = %self.name, why, "waiter left");
            self.settle(id, Answer::TimedOut);
        }
        self.maybe_idle();
    }

    /// Removes waiter `id` with its deadline and answers it, then unsubscribes its channel when
    /// no other waiter needs it. The answer goes out before the pub/sub traffic. A fair waiter
    /// that ends without the lock first leaves the Redis queue (unless another local waiter of
    /// the same holder still needs the place), so it delays nobody behind it; its caller hears
    /// back once it has left, with that round trip sent next.
    fn settle(&mut self, id: WaiterId, answer: Answer) {
        let Some((w, unused)) = self.waiters.remove(id) else {
            return;
        };
        if let Wait::Up(_) = w.wait {
            self.out.push(Effect::Cancel(Timer::Deadline(id)));
        }
        if self.waiters.is_empty() && self.retry_armed {
            self.retry_armed = false;
            self.out.push(Effect::Cancel(Timer::Retry));
        }
        let leaves = w.queued && unused && !matches!(answer, Answer::Granted { .. });
        if leaves {
            self.todo.push_front(Pending::Leave {
                holder: w.holder.clone(),
                wait: w.fair_wait,
                then: Some((id, answer)),
            });
            self.pump();
        } else {
            self.out.push(Effect::Answer(id, answer));
        }
        if unused && self.subscribed.remove(&w.channel) {
            self.out.push(Effect::Unsubscribe(w.channel));
        }
    }

    /// A message on `channel`: for a fair lock, the waiter whose turn it is; else one waiter.
    fn wake_channel(&mut self, channel: &str) {
        if self.family != LockKind::Fair {
            return self.wake_one();
        }
        let id = self
            .waiters
            .iter()
            .find(|w| &*w.channel == channel)
            .map(|w| w.id);
        if let Some(id) = id {
            self.attempt(id);
        }
    }

    /// One wake-up (unlock message, TTL run out, reconnection): one attempt for the head waiter.
    fn wake_one(&mut self) {
        if self.retry_armed {
            self.retry_armed = false;
            self.out.push(Effect::Cancel(Timer::Retry));
        }
        if let Some(id) = self.waiters.front().map(|w| w.id) {
            self.attempt(id);
        }
    }

    /// A wake-all message (a write release): every waiter gets one attempt, oldest first, one
    /// round trip at a time.
    fn wake_all(&mut self) {
        if self.retry_armed {
            self.retry_armed = false;
            self.out.push(Effect::Cancel(Timer::Retry));
        }
        self.pending_wakes = self.waiters.iter().map(|w| w.id).collect();
        self.next_wake();
    }

    /// The next pending wake-up, skipping waiters that have left meanwhile.
    fn next_wake(&mut self) {
        while let Some(id) = self.pending_wakes.pop_front() {
            if self.waiters.contains(id) {
                return self.attempt(id);
            }
        }
    }

    fn schedule_retry(&mut self, after: Duration) {
        self.retry_armed = true;
        self.out.push(Effect::Arm(Timer::Retry, after));
    }

    /// Subscribes waiter `id`'s channel (then `subscribed` tries once more).
    fn subscribe(&mut self, id: WaiterId) {
        let Some(w) = self.waiters.get(id) else {
            return;
        };
        if self.subscribed.insert(w.channel.clone()) {
            self.out.push(Effect::Subscribe(w.channel.clone()));
        }
    }

    fn set_busy(&mut self) {
        if !self.busy {
            self.busy = true;
            self.out.push(Effect::Busy);
        }
    }

    fn maybe_idle(&mut self) {
        let idle = self.holds.is_empty()
            && self.waiters.is_empty()
            && self.todo.is_empty()
            && self.flight.is_none();
        if !idle || !self.busy {
            return;
        }
        for (armed, timer) in [
            (&mut self.retry_armed, Timer::Retry),
            (&mut self.track_armed, Timer::Track),
        ] {
            if std::mem::take(armed) {
                self.out.push(Effect::Cancel(timer));
            }
        }
        for channel in std::mem::take(&mut self.subscribed) {
            self.out.push(Effect::Unsubscribe(channel));
        }
        self.busy = false;
        self.out.push(Effect::Idle);
    }
}

/// The delay before retrying after `failures` consecutive errors: doubling, capped.
pub(crate) fn backoff(failures: u32) -> Duration {
    ERROR_BACKOFF_MIN
        .saturating_mul(1 << failures.min(6))
        .min(ERROR_BACKOFF_MAX)
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
