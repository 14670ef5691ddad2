//! What a round trip's outcome does to the state.

use std::time::{Duration, Instant};

use super::holds::Hold;
use super::trips::{Flight, Pending, ReleaseFlight};
use super::*;

impl LockState {
    /// Carries out `outcome`, the reply to the round trip `flight` stood for (an unknown one
    /// is `unsure`'s).
    pub(super) fn apply_outcome(&mut self, flight: Flight, outcome: Outcome) {
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
                let tried = Tried {
                    id,
                    key,
                    lease,
                    started,
                    place,
                };
                self.attempted(tried, res);
                self.next_wake();
            }
            (Flight::Release(release), Outcome::Release(res)) => self.released(release, res),
            (Flight::Settle { key, epoch }, Outcome::Settle(res)) => {
                self.settle_ran(key, epoch, res)
            }
            (Flight::Leave { holder, wait }, Outcome::LeaveQueue(res)) => {
                self.left(holder, wait, res)
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

    /// An attempt's outcome.
    fn attempted(&mut self, tried: Tried, res: Result<Attempt, LockError>) {
        let Tried {
            id,
            key,
            lease,
            started,
            ..
        } = &tried;
        if key.1.is_fair() && matches!(res, Ok(Attempt::Acquired { .. } | Attempt::Unsynced { .. }))
        {
            // The grant took the holder out of the queue.
            self.fair.granted(&key.0, &mut self.timers);
        }
        if res.is_ok() {
            self.link.attempt_answered();
        }
        if key.1.spins()
            && let Ok(a) = &res
        {
            self.spin_tried(matches!(a, Attempt::Busy { .. }));
        }
        match res {
            Ok(Attempt::Acquired { token, fresh }) => self.acquired(tried, token, fresh),
            Ok(Attempt::Busy { ttl }) => self.found_busy(tried, ttl),
            Ok(Attempt::Gone) => {
                // Redis counts nothing of this holder: the hold counted here is gone (its key
                // deleted or expired before a renewal noticed). Its guards are told, and its
                // releases find it gone; the waiter asks again at once, as a new hold.
                if let Some(old) = self.holds.get(key).map(|h| h.epoch) {
                    self.lose(key, old, Loss::Reentry);
                }
                if self.waiters.contains(*id) {
                    self.attempt(*id);
                    if self.trips.attempting() != Some(*id) {
                        // Queued behind another round trip: it waits from now on.
                        self.watch_caller(*id);
                    }
                }
            }
            Ok(Attempt::Unsynced { acked, wanted }) => {
                // Redis granted it, but too few replicas have it: give it back, as a release
                // of a hold nobody took.
                let (epoch, _) = self.grant(key.clone(), *lease, *started);
                self.trips.queue(Pending::Release {
                    key: key.clone(),
                    epoch,
                    reply: None,
                });
                self.attempt_failed(*id, LockError::ReplicaSync { acked, wanted });
            }
            // Redis answered (a reply that never came is `unsure`'s): nothing was taken.
            Err(e) => self.attempt_failed(*id, e),
        }
    }

    /// Redis granted an attempt.
    fn acquired(&mut self, tried: Tried, token: Option<u64>, fresh: bool) {
        let Tried {
            id,
            key,
            lease,
            started,
            ..
        } = tried;
        if fresh && let Some(old) = self.holds.get(&key).map(|h| h.epoch) {
            // Redis counted nothing of this holder: the hold counted here is gone (its key
            // deleted or expired before a renewal noticed). Its guards are told, and its
            // releases find it gone, so that none of them takes back this new hold.
            self.lose(&key, old, Loss::Reentry);
        }
        if key.1 == LockKind::Read {
            // Readers share: every other reader waiting here may enter too.
            let new: Vec<WaiterId> = self
                .waiters
                .iter()
                .filter(|w| w.kind == LockKind::Read && w.id != id)
                .map(|w| w.id)
                .filter(|id| !self.waiters.wakes.contains(id))
                .collect();
            self.waiters.wakes.extend(new);
        } else if key.1 == LockKind::Write {
            self.writer_in(&key.0);
        }
        self.granted(id, key, lease, started, token);
    }

    /// An attempt found the lock taken, for `ttl` more (none: a key without expiry).
    #[inline(never)]
    fn found_busy(&mut self, tried: Tried, ttl: Option<Duration>) {
        let Tried { id, key, place, .. } = tried;
        if let Some(wait) = place {
            // The holder is queued now (it joined, or came back), even when its waiter
            // left before this request ran (sent again after an unknown outcome, after
            // the leave): unless another waiter of the holder needs it, it leaves again.
            self.take_place(&key.0, wait);
            if !self.waiters.contains(id) {
                self.leave_unused(&key.0);
            }
        }
        let Some(w) = self.waiters.get(id) else {
            // Its caller left meanwhile. This wake-up was the others' too: they wait for
            // the next message, or this TTL (a spin lock's: the next waiter's sleep).
            if self.family.spins()
                && let Some(head) = self.waiters.front().map(|w| w.id)
            {
                return self.spin_again(head, ttl);
            }
            if let (false, Some(ttl)) = (self.waiters.is_empty(), ttl) {
                self.schedule_retry(ttl);
            }
            return;
        };
        if !w.may_wait() {
            return self.answer(id, Answer::TimedOut);
        }
        if w.spin.is_some() {
            // No channel to listen on: it tries again after its next sleep.
            self.watch_caller(id);
            return self.spin_again(id, ttl);
        }
        self.subscribe(id);
        // No TTL (a key without expiry): only the unlock message can wake us.
        if let Some(ttl) = ttl {
            self.schedule_retry(ttl);
        }
    }

    /// Spin waiter `id` found the lock held: the next wake-up is after its next sleep (or the
    /// holder's `ttl`, when shorter), as Redisson's spin waiter sleeps between attempts.
    #[inline(never)]
    fn spin_again(&mut self, id: WaiterId, ttl: Option<Duration>) {
        let backoff = self.settings.spin_backoff;
        let Some(sleep) = self
            .waiters
            .get_mut(id)
            .and_then(|w| w.spin.as_mut())
            .map(|s| s.next(backoff))
        else {
            return;
        };
        let after = ttl.map_or(sleep, |ttl| sleep.min(ttl.max(Duration::from_millis(1))));
        self.schedule_retry(after);
    }

    /// Waiter `id`'s attempt failed: it tries again after a backoff when it may wait and the
    /// error may pass, else it fails with it.
    #[cold]
    fn attempt_failed(&mut self, id: WaiterId, e: LockError) {
        let Some(w) = self.waiters.get(id) else {
            return;
        };
        if let LockError::AlreadyHeld { .. } = e {
            // Redis still counted a hold of this holder that nobody holds any more: one being
            // given back (its release was queued while this attempt was under way) or one that
            // ended here a little before Redis's copy (being settled). The attempt goes again
            // once that is done; a hold with a guard is refused.
            let key = (w.holder.clone(), w.kind);
            let passing = if self.holds.contains(&key) {
                self.trips.releasing(&key)
            } else {
                self.trips.blocked(&key).is_some()
            };
            if passing {
                // Queued behind what it waits for: it waits from now on.
                self.trips.queue_attempt(id);
                self.watch_caller(id);
                return;
            }
        }
        if w.last_try && e.is_outage() {
            // A wait (not a single attempt) whose last try found Redis away says so.
            let waited = self.now.saturating_duration_since(w.since);
            let e = LockError::unavailable(&self.name, waited, e);
            self.answer(id, Answer::Failed(e));
            return self.pass_wake();
        }
        if e.is_retryable() && w.may_wait() {
            let backoff = backoff(self.link.attempt_failed());
            tracing::warn!(lock = %self.name, error = %e, ?backoff, "acquire failed, waiter retries");
            self.subscribe(id);
            self.schedule_retry(backoff);
        } else {
            // A holder's own second hold refused (non-reentrant): the lock is held, and the
            // others wait for its release as before.
            let held = matches!(e, LockError::AlreadyHeld { .. });
            self.answer(id, Answer::Failed(e));
            if !held {
                // This waiter had the turn to try (its arrival, or a wake-up): it leaves with
                // the error, so the turn goes on to the next. Nothing else would wake the
                // others: the error is the server's, not a holder's, so the lock may be free
                // and no unlock message or TTL is coming (a wait queued behind this attempt
                // waited for good).
                self.pass_wake();
            }
        }
    }

    /// Redis granted `key` for waiter `id`: record the hold and answer, or, when the waiter is
    /// gone, release it again.
    pub(super) fn granted(
        &mut self,
        id: WaiterId,
        key: HoldKey,
        lease: Option<Duration>,
        started: Instant,
        token: Option<u64>,
    ) {
        let (epoch, confirmed) = self.grant(key.clone(), lease, started);
        if let Some(w) = self.waiters.get(id) {
            // The time waited is worked out only when the event is logged.
            tracing::debug!(lock = %self.name, holder = %w.holder, waited = ?started.saturating_duration_since(w.since), "acquired");
            // The holder's other local waiters (clones of its handle) re-enter now rather than
            // at some later wake-up: for a fair lock none would come, since the holder's turn
            // in the Redis queue went with this grant.
            let twins: Vec<WaiterId> = self
                .waiters
                .iter()
                .filter(|t| t.id != id && t.holder == key.0 && t.kind == key.1)
                .map(|t| t.id)
                .collect();
            let confirmed = Some(confirmed);
            self.answer(
                id,
                Answer::Granted {
                    key,
                    epoch,
                    token,
                    confirmed,
                },
            );
            for twin in twins {
                self.attempt(twin);
            }
        } else {
            self.trips.queue(Pending::Release {
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

    /// A spin lock's release freed it (or found it gone) and published nothing: this process's
    /// own waiters, which hear no message, are woken here at once (after the hold-back, when
    /// the release ended a streak of hand-offs: `turns`). Other processes' spin waiters find
    /// it free at their next attempt.
    #[inline(never)]
    fn spin_freed(&mut self, key: &HoldKey) {
        if key.1.spins() && !self.waiters.is_empty() {
            self.wake_one();
        }
    }

    /// A release of one of `key`'s holds ran and Redis still counts the holder: its lease is
    /// `lease` again from `started`.
    #[inline(never)]
    fn still_held(&mut self, key: &HoldKey, epoch: u64, lease: Duration, started: Instant) {
        let last = self.holds.of_mut(key, epoch).is_some_and(|hold| {
            hold.count -= 1;
            hold.count == 0
        });
        if !last {
            self.expire_at(key, lease, started + lease);
            return;
        }
        // Redis still counts this holder. An unresolved acquire of it went through: its
        // resolution grants that count anew. Otherwise it is what a request given up left (the
        // holder is this actor's alone): settled to none.
        self.end_hold(key, epoch, None);
        if !self.trips.is_unsure(key) {
            tracing::warn!(lock = %self.name, holder = %key.0, "Redis counts more holds than were granted; settling");
            self.trips.abandon(key);
            self.settle(key.clone());
        }
    }

    /// A release's outcome: the hold's count, loss or hand-off, and the answer to who waits for
    /// it.
    pub(super) fn released(&mut self, release: ReleaseFlight, res: Result<HandedOff, LockError>) {
        let ReleaseFlight {
            key,
            epoch,
            lease,
            reply,
            started,
            to,
        } = release;
        // Only these leave the hold in place (the others end it).
        let kept = matches!(res, Ok(HandedOff::No(Released::StillHeld)) | Err(_));
        let res = match res {
            Ok(HandedOff::No(Released::StillHeld)) => {
                self.still_held(&key, epoch, lease, started);
                Ok(())
            }
            Ok(HandedOff::No(Released::Unlocked)) => {
                self.streak_over(&key, started);
                // Redis counted fewer holds than were granted (and no unresolved release of
                // them explains it): the others are gone. Decided from the hold the end takes
                // out (one lookup).
                let unsure = self.trips.is_unsure(&key);
                let lost = |h: &Hold| (h.count > 1 && !unsure).then_some(Loss::Release);
                if let Some(hold) = self.end_hold_by(&key, epoch, lost)
                    && hold.count > 1
                    && !unsure
                {
                    self.told_lost(&key, &hold, Loss::Release);
                }
                // A write release that leaves its holder reading publishes nothing
                // (protocol.md): wake this process's waiters here.
                if key.1 == LockKind::Write && self.holds.contains(&(key.0.clone(), LockKind::Read))
                {
                    self.wake_all();
                }
                self.spin_freed(&key);
                Ok(())
            }
            Ok(HandedOff::No(Released::NotHeld)) => {
                self.lose(&key, epoch, Loss::Release);
                self.spin_freed(&key);
                Err(not_held(&self.name, &key))
            }
            Ok(HandedOff::To { token }) => {
                self.waiters.handed_off();
                self.end_hold(&key, epoch, None);
                if let Some((id, to_key, to_lease)) = to {
                    self.granted(id, to_key, to_lease, started, token);
                }
                Ok(())
            }
            Err(e) => {
                // Redis answered with an error (a reply that never came is `unsure`'s): the
                // release did not run. Settling the hold finishes it, so a released (or dropped)
                // guard never leaves a hold renewed forever.
                if let Some(hold) = self.holds.of_mut(&key, epoch) {
                    hold.unreleased += 1;
                    self.settle_later(&key);
                }
                Err(e)
            }
        };
        if kept
            && self.settings.watch_holds
            && self
                .holds
                .of(&key, epoch)
                .is_some_and(|h| h.watchdog && !h.tracked)
        {
            // Its last release let the Watchdog go of it (`release_op`), and it is still here.
            self.watch(&key);
        }
        tracing::debug!(lock = %self.name, holder = %key.0, kind = ?key.1, ok = res.is_ok(), "release");
        if let Some(reply) = reply {
            self.out.push(Effect::Done(reply, res));
        }
    }
}

/// An attempt that Redis answered: its waiter, the hold it asked for, its lease, when it was
/// sent, and a fair attempt's place wait.
#[derive(Debug)]
struct Tried {
    id: WaiterId,
    key: HoldKey,
    lease: Option<Duration>,
    started: Instant,
    place: Option<Duration>,
}
