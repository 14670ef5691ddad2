//! Redis away, told apart from a holder (issue 57): a wait ends in [`LockError::Unavailable`],
//! not `TimedOut`, when what the name last heard of Redis was no answer.
//!
//! The rules:
//! - every round trip's outcome says whether Redis answered: an answer to an attempt, a release
//!   or a settling (a grant, a busy lock, a refusal that needs a person) ends the outage (a fair
//!   queue's leave or refresh may write nothing, so its success does not); no answer (a connection refused, dropped or
//!   silent, a reply that never came) or a refusal of a passing state (`LockError::is_outage`:
//!   `READONLY`, `LOADING`, `NOREPLICAS`, `BUSY`, too few replicas acknowledging, …) begins it,
//!   or goes on with it, and is its cause. The pub/sub connection's loss begins it too
//!   (`connection_lost`): an unlock message cannot come, and the waiters try at once, so that an
//!   answer ends it again;
//! - at its deadline a waiter is answered by what Redis says then, not by what it said last
//!   (a server frozen after a busy answer is not a holder): `Unavailable` during an outage, or
//!   when a round trip has been under way for [`LAST_TRY_GRACE`]; `TimedOut` when Redis answered
//!   within the last [`LAST_TRY_GRACE`] and nothing is under way. Otherwise the waiter is at its
//!   **last try**: it waits no more, and the next answer decides (the one under way, or, when
//!   nothing is, one last attempt of its own, as a synchronizer's wait makes): a holder
//!   `TimedOut`, a grant the lock, no answer within [`LAST_TRY_GRACE`] of the request's sending
//!   `Unavailable`. A bounded wait so ends at most [`LAST_TRY_GRACE`] after its deadline (a fair
//!   waiter too: its leave of the queue is sent after its answer);
//! - during an outage, each waiter is answered `Unavailable` once Redis has been away for
//!   `Settings::unavailable_after` of its wait (counted from the later of its arrival and the
//!   outage's start), bounded or not: no wait outlasts an outage by more than that.
//!
//! What the name has heard of Redis, and its waiters at their last try, are its [`Link`]
//! (`link.rs`); the rules here join it with the waiters and the round trips.

use std::time::{Duration, Instant};

use super::link::LastTry;
use super::*;

impl LockState {
    /// What `outcome`, of a round trip sent at `sent`, says of Redis: it answered, or it did
    /// not (or refused for a passing state) since `sent`.
    pub(super) fn heard(&mut self, outcome: &Outcome, sent: Instant) {
        let failure = match outcome {
            Outcome::Acquire(Ok(Attempt::Unsynced { acked, wanted })) => {
                Some(LockError::ReplicaSync {
                    acked: *acked,
                    wanted: *wanted,
                })
            }
            Outcome::Acquire(Err(e))
            | Outcome::Release(Err(e))
            | Outcome::LeaveQueue(Err(e))
            | Outcome::FairRefresh(Err(e))
            | Outcome::Settle(Err(e)) => e.is_outage().then(|| e.clone()),
            // A fair queue's leave or refresh may change nothing, and then runs where writes
            // are refused (`NOREPLICAS`): its success says nothing of what a waiter's attempt
            // would meet.
            Outcome::LeaveQueue(Ok(_)) | Outcome::FairRefresh(Ok(_)) | Outcome::Shutdown => {
                return;
            }
            _ => None,
        };
        match failure {
            Some(cause) => self.away(cause, sent),
            None => self.back(),
        }
    }

    /// Redis did not answer (or refused for a passing state) with `cause`, since `since`.
    #[cold]
    pub(super) fn away(&mut self, cause: LockError, since: Instant) {
        if self.link.away(cause, since) {
            self.arm_unavailable();
        }
    }

    /// Redis answered: the outage, if any, is over.
    pub(super) fn back(&mut self) {
        if self.link.back(self.now) {
            self.timers.stop(&Timer::Unavailable);
        }
    }

    /// The pub/sub connection was lost (`why`): no unlock message can come until it is back.
    /// With waiters, Redis counts as away, and they try at once: an answer ends the outage, a
    /// failure goes on with it.
    #[cold]
    pub(crate) fn connection_lost(&mut self, why: LockError, now: Instant) {
        self.now = now;
        if self.waiters.is_empty() {
            return;
        }
        self.away(why, now);
        if self.family.is_fair() {
            self.wake_all();
        } else {
            self.wake_one();
        }
    }

    /// Why a wait ends without an answer from Redis, if it does: the outage's cause, or a round
    /// trip under way for [`LAST_TRY_GRACE`].
    fn away_cause(&self) -> Option<LockError> {
        if let Some(cause) = self.link.outage().cause() {
            return Some(cause);
        }
        let sent = self.trips.under_way()?.at;
        let silent = self.now.saturating_duration_since(sent);
        (silent >= self.settings.last_try_grace).then_some(LockError::Timeout {
            op: "a round trip",
            after: silent,
        })
    }

    /// Waiter `id`'s wait ran out: `Unavailable` when Redis is away, `TimedOut` when it
    /// answered just now, else its last try (see the module's docs).
    pub(super) fn deadline(&mut self, id: WaiterId) {
        if !self.waiters.contains(id) {
            return;
        }
        if let Some(cause) = self.away_cause() {
            return self.unavailable_now(id, cause);
        }
        let heard_lately = self.link.heard_within(LAST_TRY_GRACE, self.now);
        let under_way = self.trips.under_way().map(|f| f.at);
        // A fair waiter too: its leave of the queue is sent after its answer, not waited for.
        if heard_lately && under_way.is_none() {
            tracing::debug!(lock = %self.name, "waiter left: its wait ran out");
            return self.answer(id, Answer::TimedOut);
        }
        self.waiters.last_try(id);
        let due = match under_way {
            Some(sent) => sent + self.settings.last_try_grace,
            None => {
                // Nothing under way and nothing heard lately: one last attempt asks.
                self.attempt(id);
                self.now + self.settings.last_try_grace
            }
        };
        self.link.last_try(LastTry {
            id,
            began: self.now,
            due,
        });
        self.arm_verdict();
    }

    /// Arms [`Timer::Verdict`] for the first last try due.
    fn arm_verdict(&mut self) {
        match self.link.next_verdict() {
            Some(due) => {
                let after = due.saturating_duration_since(self.now);
                self.timers.set(Timer::Verdict, self.now, after);
            }
            None => {
                self.timers.stop(&Timer::Verdict);
            }
        }
    }

    /// Waiter `id` is answered `Unavailable` now, with `cause`.
    #[cold]
    fn unavailable_now(&mut self, id: WaiterId, cause: LockError) {
        let Some(w) = self.waiters.get(id) else {
            return;
        };
        let waited = self.now.saturating_duration_since(w.since);
        tracing::debug!(lock = %self.name, %cause, "waiter left: redis is away");
        self.answer(
            id,
            Answer::Failed(LockError::unavailable(&self.name, waited, cause)),
        );
    }

    /// After a round trip's outcome: the waiters at their last try whose own attempt is not
    /// pending are answered by it: `Unavailable` during an outage, else `TimedOut` (Redis
    /// answered, and they did not get the lock).
    pub(super) fn decide_last_tries(&mut self) {
        if !self.link.awaits_verdicts() {
            return;
        }
        let (waiters, trips) = (&self.waiters, &self.trips);
        let decided = self.link.decide_last_tries(
            |id| !waiters.contains(id),
            |id| trips.attempting() != Some(id) && !trips.attempt_queued(id),
        );
        for t in decided {
            match self.link.outage().cause() {
                Some(cause) => self.unavailable_now(t.id, cause),
                None => self.answer(t.id, Answer::TimedOut),
            }
        }
        self.arm_verdict();
    }

    /// [`Timer::Verdict`] fired: the last tries due are answered, `TimedOut` when Redis has
    /// answered since each began (their own attempt aside, it said the lock is not theirs),
    /// else `Unavailable`: nothing came within [`LAST_TRY_GRACE`].
    #[cold]
    pub(super) fn verdict_due(&mut self) {
        let now = self.now;
        for t in self.link.verdicts_due(now) {
            let heard_since = self.link.heard_since(t.began);
            match self.away_cause() {
                None if heard_since => self.answer(t.id, Answer::TimedOut),
                cause => {
                    let cause = cause.unwrap_or(LockError::Timeout {
                        op: "a round trip",
                        after: now.saturating_duration_since(t.began),
                    });
                    self.unavailable_now(t.id, cause);
                }
            }
        }
        self.arm_verdict();
    }

    /// Arms [`Timer::Unavailable`] for the first waiter whose wait reaches the bound, during an
    /// outage with waiters.
    #[cold]
    pub(super) fn arm_unavailable(&mut self) {
        if !self.link.outage().is_away() {
            return;
        }
        let bound = self.settings.unavailable_after;
        let first = (self.waiters.iter())
            .filter_map(|w| self.link.outage().away_for(w.since, self.now))
            .map(|away| bound.saturating_sub(away))
            .min();
        match first {
            Some(after) => self.timers.set(Timer::Unavailable, self.now, after),
            None => {
                self.timers.stop(&Timer::Unavailable);
            }
        }
    }

    /// [`Timer::Unavailable`] fired: every waiter that has seen Redis away for the bound is
    /// answered `Unavailable`; the timer is armed again for the next.
    #[cold]
    pub(super) fn unavailable_due(&mut self) {
        let Some(cause) = self.link.outage().cause() else {
            return;
        };
        let bound = self.settings.unavailable_after;
        let due: Vec<(WaiterId, Duration)> = (self.waiters.iter())
            .filter(|w| self.link.outage().away_for(w.since, self.now) >= Some(bound))
            .map(|w| (w.id, self.now.saturating_duration_since(w.since)))
            .collect();
        for (id, waited) in due {
            tracing::warn!(lock = %self.name, %cause, ?waited, "waiter left: redis away too long");
            let error = LockError::unavailable(&self.name, waited, cause.clone());
            self.answer(id, Answer::Failed(error));
        }
        self.arm_unavailable();
    }
}
