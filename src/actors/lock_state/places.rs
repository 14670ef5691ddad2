//! Fair lock: this actor's holders' places in the Redis queue, and the leaves of places no
//! waiter uses any more, sent again until they would have expired.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use super::trips::Pending;
use super::*;

/// `recent_leaves` is swept of expired leaves when it reaches this size, then at twice what is
/// left.
const RECENT_LEAVES_MIN: usize = 64;

/// A fair-queue place whose leave failed or went unanswered: it is sent again (a leave is
/// idempotent: a second run finds no place and takes nothing off the others) until `until`, when
/// the place would have expired anyway: its wait plus the place timeout after the first failure
/// (the most a refresh or a come-back, all sent before the leave, put its deadline ahead by at
/// the head of the queue; see `LockState::left`). A new queued attempt of the holder takes the
/// place over instead (its come-back keeps the place, with the same wait).
#[derive(Debug)]
struct Leaving {
    wait: Duration,
    until: Instant,
    failures: u32,
}

/// What becomes of a failed leave ([`FairPlaces::leave_failed`]).
pub(super) enum LeaveAgain {
    /// A queued attempt of the holder took the place over meanwhile: nothing to leave.
    TakenOver,
    /// The place would have expired by now: given up.
    Expired,
    /// Sent again after this backoff ([`Timer::Leave`]).
    After(Duration),
}

/// The places. Invariant (the module's): when nothing is under way, each place has a local
/// waiter of its holder, or its failed leave is being sent again; a holder is in `places` or
/// in `leaving`, never both.
#[derive(Debug)]
pub(super) struct FairPlaces {
    /// The holders this actor may have a place for in the Redis queue, each with the wait its
    /// place was made with. Fixed at the holder's first queued attempt and used by all its
    /// requests (come-back, grant, leave), so that what a grant or a leave takes off the
    /// deadlines behind is what the place added. A place is left when its holder's last waiter
    /// ends without the lock, whichever of its waiters queued it. The wait is the manager's,
    /// `min(fair_wait_timeout, fair_place_timeout)`, the same for every waiter, never a
    /// caller's own wait: a place outlives the waiter that made it whenever a clone of the
    /// handle still waits, and must serve that clone as well (a place made with a 1 s wait, 1 s
    /// behind a dead place ahead, would expire within a refresh period of it, and the clone
    /// would queue again at the tail). A caller's short wait costs nothing there: it leaves when
    /// it gives up, and its leave takes off what its place added.
    places: FxHashMap<Arc<str>, Duration>,
    /// Places whose leave failed or went unanswered, sent again until they would have expired.
    leaving: FxHashMap<Arc<str>, Leaving>,
    /// Leaves that ran, with their wait and when, kept while the place they removed could have
    /// come back and still be alive (a failover to a replica that missed the leave): sent
    /// again, idempotently, when the pub/sub connection comes back (see `resubscribed`).
    recent_leaves: FxHashMap<Arc<str>, (Duration, Instant)>,
    /// The size of `recent_leaves` at which its expired leaves are dropped next (amortized).
    recent_leaves_cap: usize,
}

impl Default for FairPlaces {
    fn default() -> Self {
        Self {
            places: FxHashMap::default(),
            leaving: FxHashMap::default(),
            recent_leaves: FxHashMap::default(),
            recent_leaves_cap: RECENT_LEAVES_MIN,
        }
    }
}

impl FairPlaces {
    /// `holder`'s place, as a queued attempt of it is sent: the wait it was made with, or
    /// `wait` for a new one. A place being left is taken over (the come-back rule): its leave
    /// stops, and a leave made before is not sent again over the new place.
    fn take(&mut self, holder: &Arc<str>, wait: Duration, timers: &mut Timers) -> Duration {
        self.recent_leaves.remove(holder);
        if let Some(leaving) = self.leaving.remove(holder) {
            timers.stop(&Timer::Leave(holder.clone()));
            self.places.insert(holder.clone(), leaving.wait);
        }
        *self.places.entry(holder.clone()).or_insert(wait)
    }

    /// A grant took `holder` out of the queue.
    pub(super) fn granted(&mut self, holder: &Arc<str>, timers: &mut Timers) {
        self.places.remove(holder);
        if self.leaving.remove(holder).is_some() {
            timers.stop(&Timer::Leave(holder.clone()));
        }
    }

    /// Whether `holder` has a place here, or one being left.
    pub(super) fn has(&self, holder: &str) -> bool {
        self.places.contains_key(holder) || self.leaving.contains_key(holder)
    }

    /// Whether any place is held here (not being left): the refresh has work.
    pub(super) fn has_places(&self) -> bool {
        !self.places.is_empty()
    }

    /// Whether a failed leave is being sent again: the actor is busy.
    pub(super) fn is_leaving(&self) -> bool {
        !self.leaving.is_empty()
    }

    /// The wait `holder`'s place was made with, if it has one (not being left).
    pub(super) fn place(&self, holder: &str) -> Option<Duration> {
        self.places.get(holder).copied()
    }

    /// The wait of `holder`'s place being left, if its leave is to be sent again.
    pub(super) fn leave_wait(&self, holder: &str) -> Option<Duration> {
        self.leaving.get(holder).map(|l| l.wait)
    }

    /// `holder`'s leave is being sent: its place is no longer refreshed.
    pub(super) fn leaving_now(&mut self, holder: &str) {
        self.places.remove(holder);
    }

    /// Every place with its wait, for the refresh.
    pub(super) fn refresh_places(&self) -> Vec<(Arc<str>, Duration)> {
        self.places.iter().map(|(h, w)| (h.clone(), *w)).collect()
    }

    /// `holder`'s leave (of a place made with `wait`) ran; it found a place (`queued`) or none.
    /// A leave sent again stops; one that removed a place, or may have (sent again, its first
    /// run removed it), is remembered for `leave_again` unless the holder queued anew.
    pub(super) fn left(
        &mut self,
        holder: Arc<str>,
        wait: Duration,
        queued: bool,
        (now, horizon): (Instant, Duration),
        timers: &mut Timers,
    ) {
        let resent = self.leaving.remove(&holder).is_some();
        if resent {
            timers.stop(&Timer::Leave(holder.clone()));
        }
        if (queued || resent) && !self.places.contains_key(&holder) {
            self.remember_leave(holder, wait, now, horizon);
        }
    }

    /// `holder`'s leave (of a place made with `wait`) failed or went unanswered at `now`: it
    /// is sent again after a backoff until `lifetime` after its first failure, when the place
    /// would have expired anyway.
    pub(super) fn leave_failed(
        &mut self,
        holder: Arc<str>,
        wait: Duration,
        (now, lifetime): (Instant, Duration),
        timers: &mut Timers,
    ) -> LeaveAgain {
        if self.places.contains_key(&holder) {
            return LeaveAgain::TakenOver;
        }
        let leaving = self.leaving.entry(holder.clone()).or_insert(Leaving {
            wait,
            until: now + lifetime,
            failures: 0,
        });
        leaving.failures = leaving.failures.saturating_add(1);
        if now >= leaving.until {
            self.leaving.remove(&holder);
            return LeaveAgain::Expired;
        }
        let after = backoff(leaving.failures);
        timers.set(Timer::Leave(holder), now, after);
        LeaveAgain::After(after)
    }

    /// How many places are held here, and how many are being left.
    #[cfg(test)]
    pub(super) fn counts(&self) -> (usize, usize) {
        (self.places.len(), self.leaving.len())
    }

    /// Whether `holder`'s place is being left (its failed leave sent again).
    #[cfg(test)]
    pub(super) fn leaves(&self, holder: &str) -> bool {
        self.leaving.contains_key(holder)
    }

    /// A leave that removed `holder`'s place, kept for `leave_again` while the place could
    /// still be alive had a failover brought it back (`horizon`: the place timeout).
    fn remember_leave(
        &mut self,
        holder: Arc<str>,
        wait: Duration,
        now: Instant,
        horizon: Duration,
    ) {
        self.recent_leaves.insert(holder, (wait, now));
        if self.recent_leaves.len() >= self.recent_leaves_cap {
            self.recent_leaves
                .retain(|_, (wait, at)| now < *at + *wait + horizon);
            self.recent_leaves_cap = (2 * self.recent_leaves.len()).max(RECENT_LEAVES_MIN);
        }
    }

    /// The leaves that ran within the time their place could still be alive.
    fn take_recent_leaves(&mut self, now: Instant, horizon: Duration) -> Vec<(Arc<str>, Duration)> {
        self.recent_leaves_cap = RECENT_LEAVES_MIN;
        std::mem::take(&mut self.recent_leaves)
            .into_iter()
            .filter(|(_, (wait, at))| now < *at + *wait + horizon)
            .map(|(holder, (wait, _))| (holder, wait))
            .collect()
    }

    /// Every place and every place being left, to leave at a stop, one per holder.
    pub(super) fn take_all(&mut self, timers: &mut Timers) -> Vec<(Arc<str>, Duration)> {
        let mut leave: Vec<(Arc<str>, Duration)> = self.places.drain().collect();
        for (holder, leaving) in self.leaving.drain() {
            timers.stop(&Timer::Leave(holder.clone()));
            leave.push((holder, leaving.wait));
        }
        leave
    }
}

impl LockState {
    /// `holder`'s place in the fair queue, as a queued attempt of it is sent (see
    /// [`FairPlaces::take`]); the places' refresh runs from now on.
    pub(super) fn take_place(&mut self, holder: &Arc<str>, wait: Duration) -> Duration {
        let wait = self.fair.take(holder, wait, &mut self.timers);
        if !self.timers.is_armed(&Timer::Refresh) {
            self.arm_refresh();
        }
        wait
    }

    /// The wait every place of this manager is kept for after its turn,
    /// `min(fair_wait_timeout, fair_place_timeout)`: one for every waiter, never a caller's own
    /// wait (see `FairPlaces::places`).
    pub(super) fn place_wait(&self) -> Duration {
        self.settings
            .fair_wait_timeout
            .min(self.settings.fair_place_timeout)
    }

    /// Arms the places' refresh, a third of the places' wait from now (the place timeout,
    /// or a shorter fair wait timeout: a place must be refreshed before its wait runs out).
    pub(super) fn arm_refresh(&mut self) {
        let after = self.place_wait() / 3;
        self.timers.set(Timer::Refresh, self.now, after);
    }

    /// The refresh of the places, when there are any.
    #[inline(never)]
    pub(super) fn refresh_op(&self) -> Option<Op> {
        let queued = self.trips.is_queued(|p| matches!(p, Pending::Refresh));
        if !self.fair.has_places() || queued {
            return None;
        }
        Some(Op::FairRefresh {
            places: self.fair.refresh_places(),
            cap: self.settings.fair_place_timeout,
        })
    }

    /// A refresh's reply: the head of a free lock, if it is a holder here, takes its turn, and
    /// the waiters whose place is gone (pruned while they could not come back, or lost in a
    /// failover) queue again. An error changes nothing: the next refresh comes.
    #[inline(never)]
    pub(super) fn refreshed(&mut self, res: Result<Refreshed, LockError>) {
        let refreshed = match res {
            Ok(refreshed) => refreshed,
            Err(error) => {
                tracing::warn!(lock = %self.name, %error, "could not refresh the fair-queue places");
                return;
            }
        };
        let mut turns: Vec<WaiterId> = Vec::new();
        for holder in refreshed.head.iter().chain(&refreshed.gone) {
            if let Some(w) = self
                .waiters
                .iter()
                .find(|w| w.holder == *holder && w.may_wait())
                && !turns.contains(&w.id)
            {
                turns.push(w.id);
            }
        }
        for id in turns {
            self.attempt(id);
        }
    }

    /// A fair-queue leave's outcome: done, or sent again after a backoff until the place would
    /// have expired.
    #[inline(never)]
    pub(super) fn left(&mut self, holder: Arc<str>, wait: Duration, res: Result<bool, LockError>) {
        let error = match res {
            Ok(queued) => {
                let horizon = self.settings.fair_place_timeout;
                let now = self.now;
                self.fair
                    .left(holder, wait, queued, (now, horizon), &mut self.timers);
                return;
            }
            Err(error) => error,
        };
        // How long the place could last: its deadline was last set (by a refresh or a
        // come-back, before this leave was sent) to at most its wait after now + the lock's
        // PTTL capped at the place timeout, when at the head (`fair_refresh.lua`,
        // `fair_queue.lua`); it is not refreshed any more. A place behind others keeps its wait
        // after the one ahead: left here, it costs at most that wait once it is the head, as a
        // place of a killed waiter does.
        let lifetime = wait + self.settings.fair_place_timeout;
        let now = self.now;
        match self
            .fair
            .leave_failed(holder, wait, (now, lifetime), &mut self.timers)
        {
            LeaveAgain::TakenOver => {}
            LeaveAgain::Expired => {
                tracing::warn!(lock = %self.name, %error, "could not leave the fair queue; the place expires");
            }
            LeaveAgain::After(after) => {
                tracing::warn!(lock = %self.name, %error, ?after, "could not leave the fair queue; leaving again");
            }
        }
    }

    /// The pub/sub connection came back, a sign of a failover, which may have brought back
    /// places whose leave ran on the old primary: the leaves that ran within the time their
    /// place could still be alive (its wait plus the place timeout, as `left` bounds a resend)
    /// are sent again, for holders with no waiter and no place here now. A leave is idempotent:
    /// one that finds no place changes nothing.
    pub(super) fn leave_again(&mut self) {
        let horizon = self.settings.fair_place_timeout;
        let mut sent = false;
        for (holder, wait) in self.fair.take_recent_leaves(self.now, horizon) {
            let pending = self
                .trips
                .is_queued(|p| matches!(p, Pending::Leave { holder: h, .. } if *h == holder));
            if self.waiters.has_holder(&holder) || self.fair.has(&holder) || pending {
                continue;
            }
            self.trips.queue(Pending::Leave { holder, wait });
            sent = true;
        }
        if sent {
            self.set_busy();
            self.pump();
        }
    }

    /// `holder`'s place, when no waiter of it is left here to use it, is left: the round trip
    /// sent next. Nobody waits for it: a failed or unanswered leave is sent again (`left`).
    pub(super) fn leave_unused(&mut self, holder: &Arc<str>) {
        let pending = self
            .trips
            .is_queued(|p| matches!(p, Pending::Leave { holder: h, .. } if h == holder));
        let unused = !self.waiters.has_holder(holder) && !pending;
        if let Some(wait) = self.fair.place(holder)
            && unused
        {
            self.trips.queue_first(Pending::Leave {
                holder: holder.clone(),
                wait,
            });
            self.pump();
        }
    }
}
