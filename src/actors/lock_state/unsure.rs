//! Requests whose reply never came (a time-out, a connection reset): they may or may not have
//! run. Each is sent again, as it is, until Redis answers: it carries the count its holder had
//! before it (`Expect`), so a request that ran already finds the count its first run left and
//! replies as then (docs/protocol.md, "Sent again"); the state learns exactly what Redis counts
//! and never takes back a hold by guessing. Meanwhile other round trips of the name go on; a
//! release or settling of the same holder waits behind it (`Trips::held_back`, see `pump`).
//!
//! Redis out of reach for longer than the watchdog timeout (a third of it for an acquire: see
//! `horizon`): the request is given up. Its holder's
//! count is then settled by reading it (`Op::Settle`) once no other request of that holder is
//! unresolved, down to what this actor still grants, which is all the holder holds: every hold of
//! a holder is its lock actor's.

use std::time::Duration;

use super::trips::{Flight, Pending, Unsure};
use super::*;

impl LockState {
    /// The reply of an acquire, release or hand-off came: it is resolved.
    pub(super) fn resolved(&mut self, op: &Op) {
        let Some(seq) = op.seq() else {
            return;
        };
        if self.trips.end_unsure(seq).is_some() {
            self.timers.stop(&Timer::Resend(seq));
            for key in op.keys() {
                self.settle_if_clear(key);
            }
            // Waiters of the same holder were held back meanwhile.
            self.wake_all();
        }
    }

    /// The reply of `op` never came. Answers now what cannot wait for the resolution (a single
    /// attempt, a release's caller), then sends it again after a backoff, or gives it up.
    #[cold]
    pub(super) fn unresolved(&mut self, op: Op, mut flight: Flight, error: LockError) {
        let Some(id) = op.seq() else {
            return;
        };
        let now = self.now;
        let (since, failures) = match self.trips.unsure(id) {
            Some(u) => (u.since, u.failures + 1),
            None => (now, 1),
        };
        let give_up = now.saturating_duration_since(since) >= self.horizon(&op);
        tracing::warn!(lock = %self.name, %error, failures, give_up, "a request's reply never came");
        // What cannot wait for the resolution is answered once the request is recorded (or
        // given up), so that whatever runs next (a shutdown too) knows of it.
        let (mut fail_waiter, mut watch) = (None, None);
        let mut reply = None;
        match &mut flight {
            Flight::Attempt { id: waiter, .. } => match self.waiters.get(*waiter) {
                Some(w) if !w.may_wait() => fail_waiter = Some(*waiter),
                // It waits for the resolution, as for any other wake-up; a waiter that may wait
                // goes on waiting also when its request is given up, and tries again once its
                // holder's count is settled.
                Some(_) => watch = Some(*waiter),
                None => {}
            },
            Flight::Release(release) => reply = release.reply.take(),
            _ => {}
        }
        let attempt = matches!(flight, Flight::Attempt { .. });
        if give_up {
            self.trips.end_unsure(id);
            self.give_up_on(&op, flight);
        } else {
            self.timers
                .set(Timer::Resend(id), self.now, backoff(failures - 1));
            let unsure = Unsure {
                op,
                flight: Some(flight),
                since,
                failures,
                error: error.clone(),
            };
            self.trips.record_unsure(id, unsure);
        }
        if let Some(reply) = reply {
            self.out.push(Effect::Done(reply, Err(error.clone())));
        }
        if let Some(waiter) = watch {
            self.watch_caller(waiter);
        }
        if let Some(waiter) = fail_waiter {
            self.answer(waiter, Answer::Failed(error));
        }
        if attempt {
            // A wake-up this attempt was part of goes on with the next waiter.
            self.next_wake();
        }
    }

    /// How long a request is sent again before it is given up. What an acquire or hand-off
    /// grants has been counting down since its first run: resolved within a third of the
    /// watchdog timeout, a watchdog hold still has two thirds of it for the Watchdog to take
    /// over (it renews within half). A release grants nothing: a whole watchdog timeout.
    fn horizon(&self, op: &Op) -> Duration {
        let timeout = self.settings.watchdog_timeout;
        match op {
            Op::Acquire { .. } | Op::HandOff { .. } => timeout / 3,
            _ => timeout,
        }
    }

    /// The resend timer of request `id` fired: it goes first.
    #[cold]
    pub(super) fn resend(&mut self, id: u64) {
        let expired = self
            .trips
            .unsure(id)
            .is_some_and(|u| self.now.saturating_duration_since(u.since) >= self.horizon(&u.op));
        if expired {
            // Past its horizon: given up.
            if let Some(Unsure {
                op,
                flight: Some(flight),
                ..
            }) = self.trips.end_unsure(id)
            {
                tracing::warn!(lock = %self.name, "a request's reply never came; given up");
                self.give_up_on(&op, flight);
                self.pump();
            }
            return;
        }
        if self.trips.unsure(id).is_some() {
            self.trips.queue_first(Pending::Resend(id));
            self.pump();
        }
    }

    /// The request and its flight, to run again.
    #[cold]
    pub(super) fn resend_op(&mut self, id: u64) -> Option<(Op, Flight)> {
        let u = self.trips.unsure_mut(id)?;
        let flight = u.flight.take()?;
        Some((u.op.clone(), flight))
    }

    /// Redis stayed out of reach: what the request may have done to its holder's count is
    /// settled by count, once nothing else of that holder is unresolved.
    #[cold]
    fn give_up_on(&mut self, op: &Op, flight: Flight) {
        if let Flight::Release(release) = &flight
            && let Some(hold) = self.holds.of_mut(&release.key, release.epoch)
        {
            hold.unreleased += 1;
        }
        for key in op.keys() {
            self.trips.abandon(&key);
            self.settle_if_clear(key);
        }
        if let Flight::Attempt {
            key,
            place: Some(wait),
            ..
        } = &flight
        {
            // It may have queued its holder: left unless a waiter of it still needs the place.
            self.take_place(&key.0, *wait);
            self.leave_unused(&key.0);
        }
        // Waiters of the holder were held back meanwhile.
        self.wake_all();
    }

    /// Once no request of `key` is unresolved: its releases held back meanwhile go on, and its
    /// count is settled if a request of it was given up.
    fn settle_if_clear(&mut self, key: HoldKey) {
        if self.trips.is_unsure(&key) {
            return;
        }
        self.trips.release_held_back(&key);
        if self.trips.is_abandoned(&key) {
            self.settle(key);
        }
    }
}
