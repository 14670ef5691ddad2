//! Redis away, told apart from too few permits or a closed latch (issue 57): a wait whose end
//! finds Redis not answering fails with [`LockError::Unavailable`] rather than `TimedOut`.
//!
//! The rules, as a lock's (`lock_state/outage.rs`):
//! - every round trip's outcome says whether Redis answered: an answer ends the outage; no
//!   answer, or a refusal of a passing state (`LockError::is_outage`), begins or goes on with it
//!   and is its cause; so does the pub/sub connection's loss (`connection_lost`), after which
//!   every parked waiter tries at once;
//! - a waiter that has waited (not a single attempt) and whose last attempt failed with an
//!   outage error, or whose last attempt's outcome did not come within the grace after its
//!   deadline, is answered `Unavailable`; one whose last attempt was answered (too few permits,
//!   a closed latch) is answered `TimedOut`;
//! - during an outage, each waiter is answered `Unavailable` once Redis has been away for
//!   `Settings::unavailable_after` of its wait (from the later of its arrival and the outage's
//!   start), bounded or not.

use std::time::Instant;

use super::*;
use crate::protocol::Take;

impl SyncState {
    /// What `outcome` says of Redis: it answered, or it did not (or refused for a passing
    /// state).
    pub(super) fn heard(&mut self, outcome: &Outcome, sent: Instant) {
        let failure = match outcome {
            Outcome::Take(Ok(Take::Unsynced { acked, wanted })) => Some(LockError::ReplicaSync {
                acked: *acked,
                wanted: *wanted,
            }),
            Outcome::Take(Err(e)) | Outcome::Reply(Err(e)) => e.is_outage().then(|| e.clone()),
            _ => None,
        };
        match failure {
            Some(cause) => self.away(cause, sent),
            None => {
                if self.link.back() {
                    self.timers.stop(&Timer::Unavailable);
                }
            }
        }
    }

    /// Redis did not answer (or refused for a passing state) with `cause`, since `since`.
    fn away(&mut self, cause: LockError, since: Instant) {
        if self.link.away(cause, since) {
            self.arm_unavailable();
        }
    }

    /// The pub/sub connection was lost (`why`): no message can come until it is back. With
    /// waiters, Redis counts as away, and every parked waiter tries now: an answer ends the
    /// outage.
    pub(crate) fn connection_lost(&mut self, why: LockError, now: Instant) {
        self.now = now;
        if self.waiters.is_empty() {
            return;
        }
        self.away(why, now);
        self.wake_all();
    }

    /// The error a waiter that arrived at `since` gets for a wait that ends on `cause`.
    pub(super) fn unavailable(&self, since: Instant, cause: LockError) -> LockError {
        let waited = self.now.saturating_duration_since(since);
        LockError::unavailable(&self.name, waited, cause)
    }

    /// Why a wait ending now without its last attempt's outcome ends: the outage's cause, or
    /// no reply within the grace.
    pub(super) fn silence(&self) -> LockError {
        (self.link.outage().cause()).unwrap_or(LockError::Timeout {
            op: "a synchronizer's last attempt",
            after: self.settings.last_try_grace,
        })
    }

    /// Arms [`Timer::Unavailable`] for the first waiter whose wait reaches the bound, during an
    /// outage with waiters (unless armed already, for as soon or sooner).
    pub(super) fn arm_unavailable(&mut self) {
        let (outage, now) = (self.link.outage(), self.now);
        let bound = self.settings.unavailable_after;
        if !outage.is_away() {
            return;
        }
        let first = self
            .waiters
            .iter()
            .filter_map(|w| outage.away_for(w.since, now))
            .map(|away| bound.saturating_sub(away))
            .min();
        if let Some(after) = first {
            self.timers.set_sooner(Timer::Unavailable, now, after);
        }
    }

    /// [`Timer::Unavailable`] fired: every waiter that has seen Redis away for the bound is
    /// answered `Unavailable` (one whose attempt is under way too: that attempt's outcome
    /// finds it gone, and what it took is given back); the timer is armed again for the next.
    pub(super) fn unavailable_due(&mut self) {
        let (outage, now) = (self.link.outage(), self.now);
        let bound = self.settings.unavailable_after;
        let Some(cause) = outage.cause() else {
            return;
        };
        let due: Vec<WaiterId> = self
            .waiters
            .iter()
            .filter(|w| outage.away_for(w.since, now) >= Some(bound))
            .map(|w| w.id)
            .collect();
        for id in due {
            if let Some(at) = self.position(id) {
                let error = self.unavailable(self.waiters[at].since, cause.clone());
                tracing::warn!(name = %self.name, %error, "waiter left: redis away too long");
                self.answer(at, Answer::Failed(error));
            }
        }
        self.unsubscribe_if_unused();
        self.arm_unavailable();
    }
}
