//! `SyncState`: the rules of one synchronizer name in this process (a semaphore, a permit
//! semaphore or a count-down latch), pure: no actix, no Redis, no clock of its own. Its actor and
//! the per-name shell (`actors::shell`) feed it events (a waiter arrives, a round trip's outcome, a message on the channel, a
//! deadline, a timer, permits given back, a stop) and carries out the [`Effect`]s it queues.
//!
//! The state is made of rooms, as a lock's is, each with its own invariant and the rules that
//! read only it: the waiters (`waiters.rs`: who queues, who a message or a free count wakes),
//! the permits held by epoch (`held.rs`: [`Holds`]), the round trips with their lanes
//! (`trips.rs`: [`Trips`]), the link to Redis: its channel's subscription and Redis away, the
//! outage shared with a lock's (`link.rs`: [`Link`]), and the timers, one table of instants for
//! all but the waiters' deadlines (`timers.rs`: [`Timers`]; the shell keeps one timer for its
//! next instant and calls
//! [`NameState::timeout`](crate::actors::name::state::NameState::timeout)). The rules that join
//! them are `impl SyncState` blocks: arrivals, attempts, messages and deadlines (here),
//! grants, losses, give-backs and hand-offs (`held.rs`), outcomes and resends (`trips.rs`),
//! Redis away (`outage.rs`), and the requests taken in (`admit.rs`).
//!
//! The rules:
//! - a waiter's attempt (taking permits; reading a latch's count) is tried at once, unless a
//!   semaphore's waiter wanting no more is parked already (it queues behind it); when it falls short the
//!   waiter parks, and the first parked waiter subscribes the channel. Once the
//!   subscription is in place every parked waiter tries again, since a release may have come
//!   between its attempt and the subscription;
//! - a message of `m` (a semaphore's new free count; a permit semaphore's permits added or
//!   released, or its new free count) wakes up to `m` parked waiters, whatever each wants, and
//!   each tries again, as Redisson's waiters do: the number is not always what is free, so it is
//!   no budget to fit wants into (a permit semaphore's `add_permits(1)` can make room for a
//!   waiter of 2). Waiters whose wants fit into `m` go first, then the others, each group in
//!   arrival order. A message of `m` wakes at most `m` waiters (besides those whose attempt is
//!   under way, below), so a release costs about as many attempts as it frees permits however
//!   many wait; a message of 0 wakes none. A latch's `0` (open) wakes every waiter; its `1` (a new count) none;
//! - an attempt that falls short says how many permits it found free: parked waiters whose
//!   wants fit into that, in arrival order, try (a message may have woken a waiter wanting more
//!   than is free while one that fits stays parked: nothing else would wake it);
//! - a message that comes while a waiter's attempt is under way makes it try again when that
//!   attempt falls short (the attempt may have run before the release);
//! - a permit semaphore's attempt that falls short says when the permit held longest expires:
//!   the state's retry timer wakes that waiter then, since an expiry publishes nothing until some
//!   client reclaims it; when that waiter leaves first (answered, its caller gone, or its last
//!   attempt timed out), the first parked waiter is woken in its place;
//! - a retryable error while waiting retries after a backoff; any other error, and any outcome
//!   after the waiter's deadline, answers it; a permit semaphore's take whose outcome stays
//!   unknown may hold its ids in Redis (a take with them again would take its permits twice):
//!   its waiter goes on with new ids; one whose permits refused by replica sync were not given
//!   back is answered. At its deadline a parked waiter tries once more
//!   (a latch re-reads its count) and is answered with that outcome;
//! - a waiter's wait ends at its deadline even when Redis does not answer: one whose attempt's
//!   reply is missing (being sent again) is answered `TimedOut` then, and one whose attempt is
//!   under way (its last, or one begun before) gets [`Config::last_try_grace`] more for its
//!   outcome (250 ms, plus the sync timeout with replica sync: each take waits for the replicas),
//!   then `TimedOut`; a reply found missing after its deadline (or for a single attempt, whose
//!   caller gets the error, as a lock's does) answers it at once. The request goes on being sent
//!   again after its waiter left, so what it took, had it run, is given back, once (the same
//!   request latch), and what it found free is passed on to the waiters still parked;
//! - a reconnected pub/sub connection makes every parked waiter try again;
//! - permits given back here may go straight to the first parked waiter they fit (a hand-off:
//!   a plain semaphore's, at most
//!   [`MAX_HAND_OFF_STREAK`](crate::actors::name::MAX_HAND_OFF_STREAK) in a row, never with
//!   replica sync);
//! - a permit semaphore's permits taken with a lease are lost when it ends (a state timer);
//!   those taken without are renewed by the Watchdog until given back;
//! - the subscription is dropped once no waiter is left;
//! - a stop fails every waiter and gives back every hold (or drops them).

mod admit;
mod effects;
mod held;
mod link;
mod outage;
mod timers;
mod trips;
mod waiters;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

pub use crate::protocol::Adjustment;
pub(crate) use effects::{Answer, Effect, Granted, Op, Outcome, ReplyId, Timer, Trip};
use held::Holds;
use link::Link;
use timers::Timers;
use trips::{Purpose, Trips};
use waiters::{Waiter, Waiters};

#[cfg(test)]
use crate::actors::name::MAX_HAND_OFF_STREAK;
use crate::actors::name::{ERROR_BACKOFF_MAX, Loss, Phase, Wait, WaiterId, backoff};
use crate::config::Config;
#[cfg(test)]
use crate::config::LAST_TRY_GRACE;
use crate::error::LockError;
use crate::protocol::{SyncKind, Take};

/// The outcome of one attempt, as the state reads it from its round trip.
#[derive(Debug)]
pub(crate) enum Tried {
    /// The permits were taken, or the latch is open.
    Done,
    /// Not enough free permits, or the latch is closed: how many permits the attempt found
    /// free (0 for a latch); a permit semaphore's when to try again without a message.
    Short {
        free: i64,
        retry_in: Option<Duration>,
    },
    /// The attempt failed.
    Failed(LockError),
}

/// The settings the rules depend on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    /// The lease of permits taken without one, renewed by the watchdog; a third of it is how
    /// long a request is sent again.
    pub watchdog_timeout: Duration,
    /// Whether given-back permits may go straight to a local waiter (not with replica sync).
    pub hand_off: bool,
    /// How long Redis may be away during a wait before the wait fails (`outage.rs`).
    pub unavailable_after: Duration,
    /// How long after its deadline a waiter waits for its last attempt's outcome
    /// ([`Config::last_try_grace`]: with replica sync every take waits for the replicas, as a
    /// lock's last try does).
    pub last_try_grace: Duration,
}

impl Settings {
    /// The settings `config` gives.
    pub(crate) fn of(config: &Config) -> Self {
        Self {
            watchdog_timeout: config.get_watchdog_timeout(),
            // A hand-off grants without a take, so without the take's replica sync.
            hand_off: config.get_sync_replicas().is_none(),
            unavailable_after: config.get_unavailable_after(),
            last_try_grace: config.last_try_grace(),
        }
    }
}

/// What a waiter wants: permits (none for a latch), a permit semaphore's lease and ids.
#[derive(Clone, Debug)]
pub(crate) struct Want {
    pub permits: u32,
    pub lease: Option<Duration>,
    /// A permit semaphore's ids for this request, 16 bytes each: made once, sent with every
    /// attempt.
    pub ids: Arc<[u8]>,
}

/// The rules of one synchronizer name.
#[derive(Debug)]
pub(crate) struct SyncState {
    kind: SyncKind,
    name: Arc<str>,
    /// The channel its waiters are woken on.
    channel: Arc<str>,
    settings: Settings,
    waiters: Waiters,
    /// Its channel's subscription, and Redis away (`outage.rs`).
    link: Link,
    /// Permits granted here.
    holds: Holds,
    /// Round trips under way or to be sent again.
    trips: Trips,
    /// Every timer but the waiters' deadlines.
    timers: Timers,
    phase: Phase,
    /// Whether it has a waiter, a hold or a round trip (told as `Busy` and `Idle`).
    busy: bool,
    now: Instant,
    effects: Vec<Effect>,
}

impl SyncState {
    pub(crate) fn new(kind: SyncKind, name: Arc<str>, settings: Settings, now: Instant) -> Self {
        Self {
            channel: kind.channel(&name).into(),
            kind,
            name,
            settings,
            waiters: Waiters::default(),
            link: Link::default(),
            holds: Holds::default(),
            trips: Trips::default(),
            timers: Timers::default(),
            phase: Phase::Running,
            busy: false,
            now,
            effects: Vec::new(),
        }
    }

    /// Moves the queued effects into `out`, in order, the last of them whether the actor is
    /// busy when that changed (as a lock state's are).
    pub(crate) fn drain_into(&mut self, out: &mut Vec<Effect>) {
        self.update_busy();
        out.append(&mut self.effects);
    }

    /// Whether no waiter is left.
    #[cfg(test)]
    pub(crate) fn is_idle(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Whether a stop was asked for: nothing new is served.
    pub(crate) fn is_stopping(&self) -> bool {
        self.phase != Phase::Running
    }

    /// A number for the next waiter, unique within this state.
    pub(crate) fn next_waiter(&mut self) -> WaiterId {
        self.waiters.next_id()
    }

    /// Whether waiter `id` is still waiting.
    pub(crate) fn has(&self, id: WaiterId) -> bool {
        self.position(id).is_some()
    }

    /// The waiters whose attempt is not under way, with their wants.
    #[cfg(test)]
    pub(crate) fn parked(&self) -> impl Iterator<Item = (WaiterId, u32)> + '_ {
        self.waiters
            .iter()
            .filter(|w| !w.trying)
            .map(|w| (w.id, w.wants))
    }

    /// How many waiters there are.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiters.len()
    }

    /// A waiter arrives wanting `wants` permits (0: a latch's opening), for as long as `wait`.
    /// It tries at once, unless a semaphore's parked waiter wanting no more than it waits already
    /// (whose last attempt fell short, and no message since made room for it; not one waiting
    /// out an error's backoff, whose retry may succeed with nobody told): then it queues
    /// behind, to be woken by the next message or handed permits, without a round trip that
    /// would fail. A latch's waiter always reads the count: a latch can open without a message
    /// (its key expired or was lost).
    pub(crate) fn request(&mut self, id: WaiterId, want: Want, wait: Wait, now: Instant) {
        self.now = now;
        let wait = wait.normalized();
        let once = wait == Wait::No;
        if let Wait::Up(d) = wait {
            self.effects.push(Effect::Arm(id, d));
        }
        let wants = want.permits;
        let queue = !once
            && self.kind != SyncKind::CountDownLatch
            && self.link.has_subscription()
            && self.waiters.parked_wanting_at_most(wants);
        self.waiters.push(Waiter {
            id,
            wants,
            trying: !queue,
            again: false,
            last: once,
            once,
            due: false,
            failures: 0,
            waited: queue,
            watched: false,
            lease: want.lease,
            ids: want.ids,
            sent: now,
            since: now,
        });
        // Redis is away already: this wait too ends once it has been for the bound.
        self.arm_unavailable();
        if queue {
            self.watch_caller(id);
        } else {
            self.attempt(id);
        }
    }

    /// Has waiter `id`'s caller watched, once (`Effect::Watch`).
    fn watch_caller(&mut self, id: WaiterId) {
        if let Some(at) = self.position(id)
            && !std::mem::replace(&mut self.waiters[at].watched, true)
        {
            self.effects.push(Effect::Watch(id));
        }
    }

    /// Runs waiter `id`'s attempt: take its permits, or read the latch's count.
    fn attempt(&mut self, id: WaiterId) {
        let Some(at) = self.position(id) else {
            return;
        };
        let waiter = &mut self.waiters[at];
        waiter.trying = true;
        let op = if self.kind == SyncKind::CountDownLatch {
            Op::Read { waiter: id }
        } else {
            waiter.sent = self.now;
            Op::Take {
                waiter: id,
                permits: waiter.wants,
                ids: waiter.ids.clone(),
                lease: waiter.lease.unwrap_or(self.settings.watchdog_timeout),
            }
        };
        self.run(op, Purpose::Attempt(id));
    }

    /// Runs the attempts of these waiters, in order.
    fn attempt_all(&mut self, ids: Vec<WaiterId>) {
        for id in ids {
            self.attempt(id);
        }
    }

    /// Waiter `id`'s attempt came back.
    fn tried(&mut self, id: WaiterId, tried: Tried, now: Instant) {
        let Some(at) = self.position(id) else {
            // Its waiter left first (its wait ended while the reply was missing): what the
            // attempt found is passed on as its waiter would have, a permit semaphore's hint
            // to the first parked waiter (nothing publishes a lease's end).
            if let Tried::Short { free, retry_in } = tried {
                if let Some(after) = retry_in
                    && let Some(next) = self.waiters.first_parked()
                {
                    next.due = true;
                    self.arm(now + after, now);
                }
                self.pass_on(free);
            }
            return;
        };
        let waiter = &mut self.waiters[at];
        waiter.trying = false;
        match tried {
            Tried::Done => {
                let waited = waiter.waited;
                self.grant(at, waited);
            }
            Tried::Failed(error) if waiter.last || !error.is_retryable() => {
                // A wait (not a single attempt) that ends on Redis away says so.
                let (once, since) = (waiter.once, waiter.since);
                let error = if !once && error.is_outage() {
                    self.unavailable(since, error)
                } else {
                    error
                };
                self.answer(at, Answer::Failed(error));
            }
            Tried::Failed(error) => {
                waiter.failures += 1;
                waiter.due = true;
                let after = backoff(waiter.failures);
                tracing::debug!(%error, ?after, "synchronizer attempt failed; retrying");
                self.arm(now + after, now);
                self.watch_caller(id);
            }
            Tried::Short { free, retry_in } if waiter.last => {
                // Its hint outlives it: handed on as it leaves, to a waiter parked behind it.
                if let Some(after) = retry_in {
                    waiter.due = true;
                    self.arm(now + after, now);
                }
                self.answer(at, Answer::TimedOut);
                self.pass_on(free);
            }
            Tried::Short { free, retry_in } => {
                waiter.failures = 0;
                waiter.waited = true;
                self.watch_caller(id);
                let waiter = &mut self.waiters[at];
                if std::mem::take(&mut waiter.again) {
                    self.attempt(id);
                } else {
                    if let Some(after) = retry_in {
                        waiter.due = true;
                        self.arm(now + after, now);
                    }
                    if self.link.subscribe() {
                        self.effects.push(Effect::Subscribe(self.channel.clone()));
                    }
                }
                self.pass_on(free);
            }
        }
        self.unsubscribe_if_unused();
    }

    /// An attempt fell short with `free` permits free: parked waiters whose wants fit into
    /// them, in arrival order, try. A message's number is not always what is free, so the
    /// waiters it woke may be ones that want more while one that fits stays parked; the count
    /// an attempt found is what is free, so it is a budget.
    fn pass_on(&mut self, free: i64) {
        let woken = self.waiters.fitting(free);
        self.attempt_all(woken);
    }

    /// The subscription asked for is in place (`ok`) or failed.
    pub(crate) fn subscribed(&mut self, ok: bool, now: Instant) {
        self.now = now;
        match self.link.subscribed(ok) {
            None => {}
            Some(true) => self.wake_all(),
            Some(false) => {
                // The next attempt that falls short asks again; meanwhile the timer retries.
                self.waiters.all_due();
                self.arm(now + ERROR_BACKOFF_MAX, now);
            }
        }
    }

    /// A message on the channel: a number of permits, or a latch's `0`/`1`.
    pub(crate) fn unlocked(&mut self, count: Option<i64>, now: Instant) {
        self.now = now;
        let count = count.unwrap_or(0);
        if self.kind == SyncKind::CountDownLatch {
            if count == 0 {
                self.wake_all();
            }
            return;
        }
        if count <= 0 {
            return;
        }
        // Up to `count` parked waiters, whatever each wants: the number is not always what is
        // free (a permit semaphore publishes a delta, or a count released), so it is no budget
        // to fit wants into. Those whose wants fit into it go first, so a small waiter is not
        // passed over for a large one when the number is the free count.
        let woken = self.waiters.woken_by(count);
        self.attempt_all(woken);
    }

    /// Messages may have been lost (the pub/sub connection came back): everyone tries again.
    pub(crate) fn resubscribed(&mut self, now: Instant) {
        self.now = now;
        self.wake_all();
    }

    /// `timer` fired (a deadline, through the shell; any other, through
    /// [`NameState::timeout`]): it is armed no more.
    pub(crate) fn fired(&mut self, timer: Timer, now: Instant) {
        self.now = now;
        self.timers.stop(&timer);
        match timer {
            Timer::Deadline(id) => self.deadline(id),
            Timer::Retry => self.retry(),
            Timer::Expiry(epoch) => self.lose(epoch, Loss::Lease),
            Timer::Resend(seq) => self.resend(seq),
            Timer::Unavailable => self.unavailable_due(),
        }
    }

    /// The retry timer fired: the waiters it was armed for try again.
    fn retry(&mut self) {
        let woken = self.waiters.take_due();
        self.attempt_all(woken);
    }

    /// Waiter `id`'s deadline passed: one more attempt decides, if its outcome comes within
    /// the last attempt's grace (`Settings::last_try_grace`). The timer is armed again for then: firing on a waiter whose
    /// outcome is still to come, it answers `TimedOut`. So does the deadline itself when the
    /// reply of the waiter's attempt is known missing (the request is being sent again): no
    /// outcome is coming soon. The request goes on without it (see [`SyncState::ran`]).
    fn deadline(&mut self, id: WaiterId) {
        let Some(at) = self.position(id) else {
            return;
        };
        let (trying, last) = (self.waiters[at].trying, self.waiters[at].last);
        if trying && (last || self.trips.reply_missing(id)) {
            self.stop_waiting(id);
            return;
        }
        self.waiters[at].last = true;
        (self.effects).push(Effect::Arm(id, self.settings.last_try_grace));
        if !self.waiters[at].trying {
            self.attempt(id);
        }
    }

    /// Waiter `id`'s caller left: a parked waiter goes; one whose attempt is under way is
    /// answered by that attempt's outcome (a grant nobody takes is given back by the actor).
    pub(crate) fn caller_gone(&mut self, id: WaiterId, now: Instant) {
        self.now = now;
        let Some(at) = self.position(id) else {
            return;
        };
        if self.waiters[at].trying {
            self.waiters[at].last = true;
        } else {
            self.leave(at);
            self.unsubscribe_if_unused();
        }
    }

    /// The actor is gone: every waiter it still had fails with `Shutdown`.
    pub(crate) fn abandon(&mut self) {
        self.fail_waiters();
    }

    /// Every waiter leaves with `Shutdown`.
    fn fail_waiters(&mut self) {
        for w in self.waiters.drain() {
            let answer = Answer::Failed(LockError::Shutdown);
            self.effects.push(Effect::Answer(w.id, answer));
        }
        self.unsubscribe_if_unused();
    }

    fn position(&self, id: WaiterId) -> Option<usize> {
        self.waiters.position(id)
    }

    fn answer(&mut self, at: usize, answer: Answer) {
        let waiter = self.leave(at);
        self.effects.push(Effect::Answer(waiter.id, answer));
    }

    /// Waiter `at` leaves (answered, or its caller gone). The retry timer wakes only the
    /// waiters due, and a permit semaphore's permit whose lease ends publishes nothing until
    /// some client's script reclaims it: when the waiter the timer was armed for leaves, a
    /// waiter parked behind it (queued at arrival without an attempt, so without a hint of its
    /// own) would wait for ever. The first parked waiter becomes due in its place; its attempt
    /// then passes on what it finds free.
    fn leave(&mut self, at: usize) -> Waiter {
        let hand_on_due =
            self.kind == SyncKind::PermitSemaphore && self.timers.is_armed(&Timer::Retry);
        self.waiters.remove(at, hand_on_due)
    }

    fn wake_all(&mut self) {
        let woken = self.waiters.wake_all();
        self.attempt_all(woken);
    }

    /// Arms the retry timer for `at`, unless it fires sooner already.
    fn arm(&mut self, at: Instant, now: Instant) {
        let after = at.saturating_duration_since(now);
        self.timers.set_sooner(Timer::Retry, now, after);
    }

    /// Drops the subscription once nobody waits.
    fn unsubscribe_if_unused(&mut self) {
        if self.waiters.is_empty() && self.link.unsubscribe() {
            self.effects.push(Effect::Unsubscribe(self.channel.clone()));
        }
    }

    /// A waiter, a hold or a round trip: the actor is busy (`update_busy`).
    pub(super) fn has_work(&self) -> bool {
        !self.waiters.is_empty() || !self.holds.is_empty() || !self.trips.is_empty()
    }

    /// Tells the actor when it becomes busy (a waiter, a hold or a round trip) and when it
    /// falls idle, once per event, as its effects are taken (`drain_into`); a stopping actor
    /// does not linger. An idle actor's retry timer goes: it would wake nobody, and the shell's
    /// timer for the table keeps its actor alive while set (a permit semaphore's retry is armed
    /// for the earliest permit to expire, a watchdog timeout away, and held a departed actor
    /// that long).
    fn update_busy(&mut self) {
        let busy = self.has_work();
        if busy == self.busy {
            return;
        }
        self.busy = busy;
        if busy {
            self.effects.push(Effect::Busy);
            return;
        }
        self.timers.stop(&Timer::Retry);
        self.timers.stop(&Timer::Unavailable);
        if self.phase == Phase::Running {
            self.effects.push(Effect::Idle);
        }
    }
}

#[cfg(test)]
mod simulation;
#[cfg(test)]
mod tests;
