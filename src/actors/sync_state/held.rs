//! Permits granted here, by epoch: their grant, their lease's end (a state timer), their loss,
//! their give-back — straight to a local waiter (a hand-off) or through Redis — and the stop.

use super::*;

/// Permits granted here and not yet given back.
#[derive(Debug)]
pub(super) struct Held {
    pub permits: u32,
    pub ids: Arc<[u8]>,
    /// Renewed by the Watchdog (a permit semaphore's, taken without a lease).
    pub tracked: bool,
    /// Its lease's end is armed ([`Timer::Expiry`]).
    pub expires: bool,
    /// Known gone from Redis (its lease ended, or renewal found it gone).
    pub lost: bool,
}

impl SyncState {
    /// Answers waiter `at` with its permits (or a latch's opening): a permit semaphore's are
    /// renewed by the Watchdog when taken without a lease, or lost when their lease ends.
    pub(super) fn grant(&mut self, at: usize, waited: bool) {
        let waiter = self.leave(at);
        let grant = (self.kind != SyncKind::CountDownLatch).then(|| {
            self.epoch += 1;
            let epoch = self.epoch;
            let permit = self.kind == SyncKind::PermitSemaphore;
            let tracked = permit && waiter.lease.is_none();
            let expires = permit && waiter.lease.is_some();
            self.holds.insert(
                epoch,
                Held {
                    permits: waiter.wants,
                    ids: waiter.ids.clone(),
                    tracked,
                    expires,
                    lost: false,
                },
            );
            // A plain semaphore's permits never expire: nothing to confirm.
            let confirmed = permit.then(|| {
                let ttl = waiter.lease.unwrap_or(self.settings.watchdog_timeout);
                (waiter.sent, ttl)
            });
            Granted {
                epoch,
                permits: waiter.wants,
                ids: waiter.ids.clone(),
                confirmed,
            }
        });
        let epoch = grant.as_ref().map(|g| g.epoch);
        self.effects
            .push(Effect::Answer(waiter.id, Answer::Done { waited, grant }));
        let Some(epoch) = epoch else {
            return;
        };
        if let Some(held) = self.holds.get(&epoch) {
            if held.tracked {
                // Redis set their PTTL when the take ran, no earlier than it was first sent.
                self.effects.push(Effect::Track {
                    hold: held.ids.clone(),
                    epoch,
                    confirmed: waiter.sent,
                });
            }
            if let Some(lease) = waiter.lease.filter(|_| held.expires) {
                self.effects.push(Effect::Arm(Timer::Expiry(epoch), lease));
            }
        }
    }

    /// The permits of `epoch` are gone from Redis (renewal found them gone, or their lease
    /// ended): their guard learns it; a later give-back of them replies `NotHeld`.
    pub(super) fn lose(&mut self, epoch: u64, why: Loss) {
        let Some(held) = self.holds.get_mut(&epoch) else {
            return;
        };
        if held.lost {
            return;
        }
        held.lost = true;
        tracing::warn!(name = %self.name, kind = self.kind.label(), reason = why.describe(), "permits lost");
        self.effects.push(Effect::Lost(epoch, why));
        if std::mem::take(&mut held.expires) && why != Loss::Lease {
            self.effects.push(Effect::Cancel(Timer::Expiry(epoch)));
        }
    }

    /// The Watchdog found the permits of `epoch` gone, or could not renew them in time.
    pub(crate) fn hold_lost(&mut self, epoch: u64, now: Instant) {
        self.now = now;
        if let Some(held) = self.holds.get_mut(&epoch) {
            held.tracked = false;
        }
        self.lose(epoch, Loss::Watchdog);
    }

    /// The permits of `epoch` are given back; `reply` gets the outcome.
    pub(crate) fn release(&mut self, epoch: u64, reply: Option<ReplyId>, now: Instant) {
        self.now = now;
        self.give_back_now(epoch, reply);
    }

    fn give_back_now(&mut self, epoch: u64, reply: Option<ReplyId>) {
        let Some(held) = self.holds.remove(&epoch) else {
            if let Some(reply) = reply {
                self.effects.push(Effect::Done(reply, Err(self.not_held())));
            }
            return;
        };
        self.effects.push(Effect::Ended(epoch));
        if held.tracked {
            self.effects.push(Effect::Untrack {
                hold: held.ids.clone(),
                epoch,
            });
        }
        if held.expires {
            self.effects.push(Effect::Cancel(Timer::Expiry(epoch)));
        }
        let mut permits = held.permits;
        let handed = if held.lost {
            None
        } else {
            self.hand_off(permits)
        };
        match handed {
            Some(handed) => {
                permits -= handed;
                if permits == 0 {
                    if let Some(reply) = reply {
                        self.effects.push(Effect::Done(reply, Ok(0)));
                    }
                    return;
                }
            }
            None => self.streak = 0,
        }
        let op = Op::Give {
            permits,
            ids: held.ids,
        };
        let purpose = Purpose::GiveBack {
            reply,
            permits,
            was_lost: held.lost,
        };
        self.run(op, purpose);
    }

    /// A give-back's reply came: its caller learns how it went.
    pub(super) fn given_back(
        &mut self,
        reply: Option<ReplyId>,
        (permits, was_lost): (u32, bool),
        outcome: Outcome,
    ) {
        let res = match outcome {
            // A permit semaphore replies how many ids were still held.
            Outcome::Reply(Ok(released))
                if self.kind == SyncKind::PermitSemaphore
                    && (was_lost || released < i64::from(permits)) =>
            {
                Err(self.not_held())
            }
            Outcome::Reply(Ok(_)) | Outcome::Take(Ok(_)) => Ok(()),
            Outcome::Reply(Err(e)) | Outcome::Take(Err(e)) => Err(e),
        };
        if let Err(error) = &res {
            tracing::debug!(%error, name = %self.name, "give back");
        }
        if let Some(reply) = reply {
            self.effects.push(Effect::Done(reply, res.map(|()| 0)));
        }
    }

    /// Hands up to `permits` permits of a plain semaphore being given back to the first parked
    /// local waiter they fit, without a round trip: Redis's free count stays as it is, and the
    /// permits change hands here. Returns how many were handed. At most
    /// [`MAX_HAND_OFF_STREAK`] in a row, so that an ordinary release (and its message) lets
    /// other processes' waiters in; never with replica sync (a hand-off is a grant without the
    /// take's replica wait). A permit semaphore's permits carry leases and renewals of their
    /// own, and are always given back through Redis. A waiter whose attempt is under way may
    /// get its permits by itself, and one at its deadline is answered by its last attempt: not
    /// them.
    pub(super) fn hand_off(&mut self, permits: u32) -> Option<u32> {
        if self.kind != SyncKind::Semaphore
            || self.streak >= MAX_HAND_OFF_STREAK
            || !self.settings.hand_off
        {
            return None;
        }
        let at = self
            .waiters
            .iter()
            .position(|w| !w.trying && !w.last && w.wants <= permits)?;
        let wants = self.waiters[at].wants;
        self.streak += 1;
        tracing::trace!(name = %self.name, permits = wants, "permits handed off");
        self.grant(at, true);
        self.unsubscribe_if_unused();
        Some(wants)
    }

    /// Stop: every waiter fails with `Shutdown`, and, when `release`, every hold is given back
    /// through Redis (the others are dropped: their guards learn them lost at once, not when
    /// the round trips under way are over). Ends with
    /// [`Effect::Stopped`] once no round trip is under way: those give-backs, and attempts
    /// already sent, whose permits, should they have been taken, go back too.
    pub(crate) fn stop(&mut self, release: bool, now: Instant) {
        self.now = now;
        self.phase = Phase::Stopping;
        self.fail_waiters();
        let mut epochs: Vec<u64> = self.holds.keys().copied().collect();
        epochs.sort_unstable();
        for epoch in epochs {
            if release {
                self.give_back_now(epoch, None);
            } else {
                self.lose(epoch, Loss::Shutdown);
                self.holds.remove(&epoch);
            }
        }
        self.maybe_stopped();
    }

    pub(super) fn maybe_stopped(&mut self) {
        if self.phase == Phase::Stopping && self.trips.is_empty() {
            self.phase = Phase::Stopped;
            self.effects.push(Effect::Stopped);
        }
    }

    pub(super) fn not_held(&self) -> LockError {
        LockError::NotHeld {
            name: self.name.to_string(),
            holder: "these permits".into(),
        }
    }
}
