//! The uncontended pair's short path. An idle name (no waiter, nothing queued, under way,
//! unresolved, held back or being settled, no hold-back after a streak, Redis not known away)
//! of an unfair kind that does not spin takes a request straight to its attempt; the grant of
//! its only waiter goes straight to its answer; a release with nothing else queued goes straight
//! to its round trip, and a release that freed the lock with nobody waiting straight to the
//! hold's end. Each does what the general rules do in that case, without the steps that find
//! nothing to do there: the queue of round trips and its pump, the joining of a local queue,
//! the twins, the wake-ups, the holds found gone while releasing, the resolution of unsure
//! requests and the last tries. The effects are the same, in the same order: the differential
//! test (`tests/short.rs`) runs random event sequences with the short path on and off.

use std::time::Instant;

use super::trips::Flight;
use super::*;

impl LockState {
    /// Tests only: counts a step that took the short path.
    fn took_short(&mut self) {
        #[cfg(test)]
        {
            self.shorts += 1;
        }
    }

    /// Whether the short path is taken (off in tests that compare it with the general rules).
    fn short_on(&self) -> bool {
        #[cfg(test)]
        {
            !self.general_only
        }
        #[cfg(not(test))]
        {
            true
        }
    }

    /// Whether the name is idle for a request: nothing waits, nothing is under way, queued,
    /// unresolved, held back or being settled, no hold-back runs (`turns`), Redis is not known
    /// away, and the kind queues nowhere else (a fair lock's places) nor spins.
    pub(super) fn idle_for(&self, kind: LockKind) -> bool {
        self.short_on()
            && self.phase == Phase::Running
            && !kind.is_fair()
            && !kind.spins()
            && self.waiters.is_empty()
            && self.trips.is_empty()
            && !self.link.outage().is_away()
            && !self.timers.is_armed_kind(&Timer::Turn)
    }

    /// A request to an idle name ([`idle_for`](Self::idle_for)): its waiter goes straight to
    /// its attempt, the only round trip (`wait` is its normalized wait).
    pub(super) fn request_short(&mut self, id: WaiterId, req: Request, wait: Wait, now: Instant) {
        let Request {
            holder,
            kind,
            lease,
            ..
        } = req;
        self.took_short();
        if let Wait::Up(d) = wait {
            self.out.push(Effect::Arm(id, d));
        }
        self.waiters.push(Waiter {
            id,
            spin: None,
            holder: holder.clone(),
            kind,
            lease,
            wait,
            since: now,
            watched: false,
            last_try: false,
        });
        self.set_busy();
        // Nothing of its holder is unresolved or being settled (the trips are empty).
        let (op, flight) = self.acquire_op(id, (holder, kind), lease, wait == Wait::No);
        self.send(op, flight);
    }

    /// A release with nothing queued, under way or unresolved: straight to its round trip.
    /// Whether it went so.
    pub(super) fn release_short(
        &mut self,
        key: HoldKey,
        epoch: u64,
        reply: Option<ReplyId>,
    ) -> Result<(), (HoldKey, Option<ReplyId>)> {
        if !(self.short_on() && self.phase == Phase::Running && self.trips.is_empty()) {
            return Err((key, reply));
        }
        self.took_short();
        if let Some((op, flight)) = self.release_op(key, epoch, reply) {
            self.send(op, flight);
        }
        Ok(())
    }

    /// Whether the round trip that landed (`flight`, with `outcome`) takes the short path: the
    /// grant of the only waiter with no hold here, or a release that freed the lock with nobody
    /// waiting; nothing else queued, unresolved, held back or being settled, no hold found gone
    /// during its release, no wake-up pending and no last try waiting for a verdict.
    pub(super) fn lands_short(&self, flight: &Flight, outcome: &Outcome) -> bool {
        let clear = self.short_on()
            && self.phase == Phase::Running
            && !self.family.is_fair()
            && !self.family.spins()
            && self.trips.is_empty()
            && self.waiters.wakes.is_empty()
            && !self.link.awaits_verdicts()
            && self.holds.none_gone_releasing();
        if !clear {
            return false;
        }
        match (flight, outcome) {
            (Flight::Attempt { id, .. }, Outcome::Acquire(Ok(Attempt::Acquired { .. }))) => {
                self.holds.is_empty() && self.waiters.only(*id)
            }
            (Flight::Release(r), Outcome::Release(Ok(HandedOff::No(Released::Unlocked)))) => {
                r.to.is_none() && r.key.1 != LockKind::Write && self.waiters.is_empty()
            }
            _ => false,
        }
    }

    /// Carries out a round trip's outcome on the short path ([`lands_short`](Self::lands_short)).
    pub(super) fn land_short(&mut self, flight: Flight, outcome: Outcome) {
        self.took_short();
        // Redis answered.
        self.back();
        // The outcome is read in place, not moved with the flight into one pair.
        match (flight, &outcome) {
            (
                Flight::Attempt {
                    id,
                    key,
                    lease,
                    started,
                    ..
                },
                &Outcome::Acquire(Ok(Attempt::Acquired { token, .. })),
            ) => {
                self.link.attempt_answered();
                // No hold of its holder here (nothing to find gone), no other waiter (no reader
                // to let in, no wake-up to drop for a writer): the general grant finds no twin
                // and arms no retry.
                self.granted(id, key, lease, started, token);
            }
            (Flight::Release(release), &Outcome::Release(Ok(res))) => {
                self.released(release, Ok(res))
            }
            (flight, outcome) => {
                tracing::error!(lock = %self.name, ?flight, ?outcome, "a short round trip's outcome does not match it");
            }
        }
    }
}
