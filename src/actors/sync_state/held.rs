//! Permits granted here, by epoch: the [`Holds`] room (each grant's permits, ids, renewal, lease
//! and loss), and the rules over it: a grant, its lease's end (a state timer), its loss, its
//! give-back — straight to a local waiter (a hand-off) or through Redis — and the stop.

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

/// The permits granted here, by epoch. Invariant: an epoch is given once in this state, in
/// increasing order, and names its grant until it is given back or dropped.
#[derive(Debug, Default)]
pub(super) struct Holds {
    by_epoch: FxHashMap<u64, Held>,
    /// The last epoch given.
    last_epoch: u64,
}

impl Holds {
    /// Records a grant: its new epoch.
    pub(super) fn add(&mut self, held: Held) -> u64 {
        self.last_epoch += 1;
        self.by_epoch.insert(self.last_epoch, held);
        self.last_epoch
    }

    #[cfg(test)]
    pub(super) fn get(&self, epoch: u64) -> Option<&Held> {
        self.by_epoch.get(&epoch)
    }

    pub(super) fn remove(&mut self, epoch: u64) -> Option<Held> {
        self.by_epoch.remove(&epoch)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.by_epoch.is_empty()
    }

    /// Every epoch held, oldest first.
    pub(super) fn epochs(&self) -> Vec<u64> {
        let mut epochs: Vec<u64> = self.by_epoch.keys().copied().collect();
        epochs.sort_unstable();
        epochs
    }

    /// The permits of `epoch` are known gone from Redis: `None` when they are not held here or
    /// known lost already, else whether their lease's end was armed (it is not any more).
    pub(super) fn lose(&mut self, epoch: u64) -> Option<bool> {
        let held = self.by_epoch.get_mut(&epoch)?;
        if std::mem::replace(&mut held.lost, true) {
            return None;
        }
        Some(std::mem::take(&mut held.expires))
    }

    /// The Watchdog renews the permits of `epoch` no more.
    pub(super) fn untrack(&mut self, epoch: u64) {
        if let Some(held) = self.by_epoch.get_mut(&epoch) {
            held.tracked = false;
        }
    }
}

impl SyncState {
    /// Answers waiter `at` with its permits (or a latch's opening): a permit semaphore's are
    /// renewed by the Watchdog when taken without a lease, or lost when their lease ends.
    pub(super) fn grant(&mut self, at: usize, waited: bool) {
        let waiter = self.leave(at);
        if self.kind == SyncKind::CountDownLatch {
            let answer = Answer::Done {
                waited,
                grant: None,
            };
            self.effects.push(Effect::Answer(waiter.id, answer));
            return;
        }
        let permit = self.kind == SyncKind::PermitSemaphore;
        let tracked = permit && waiter.lease.is_none();
        let expires = permit && waiter.lease.is_some();
        let epoch = self.holds.add(Held {
            permits: waiter.wants,
            ids: waiter.ids.clone(),
            tracked,
            expires,
            lost: false,
        });
        // A plain semaphore's permits never expire: nothing to confirm.
        let confirmed = permit.then(|| {
            let ttl = waiter.lease.unwrap_or(self.settings.watchdog_timeout);
            (waiter.sent, ttl)
        });
        let grant = Granted {
            epoch,
            permits: waiter.wants,
            ids: waiter.ids.clone(),
            confirmed,
        };
        let answer = Answer::Done {
            waited,
            grant: Some(grant),
        };
        self.effects.push(Effect::Answer(waiter.id, answer));
        if tracked {
            // Redis set their PTTL when the take ran, no earlier than it was first sent.
            self.effects.push(Effect::Track {
                hold: waiter.ids.clone(),
                epoch,
                confirmed: waiter.sent,
            });
        }
        if let Some(lease) = waiter.lease.filter(|_| expires) {
            self.timers.set(Timer::Expiry(epoch), self.now, lease);
        }
    }

    /// The permits of `epoch` are gone from Redis (renewal found them gone, or their lease
    /// ended): their guard learns it; a later give-back of them replies `NotHeld`.
    pub(super) fn lose(&mut self, epoch: u64, why: Loss) {
        let Some(expired) = self.holds.lose(epoch) else {
            return;
        };
        tracing::warn!(name = %self.name, kind = self.kind.label(), reason = why.describe(), "permits lost");
        self.effects.push(Effect::Lost(epoch, why));
        if expired && why != Loss::Lease {
            self.timers.stop(&Timer::Expiry(epoch));
        }
    }

    /// The Watchdog found the permits of `epoch` gone, or could not renew them in time.
    pub(crate) fn hold_lost(&mut self, epoch: u64, now: Instant) {
        self.now = now;
        self.holds.untrack(epoch);
        self.lose(epoch, Loss::Watchdog);
    }

    /// The permits of `epoch` are given back; `reply` gets the outcome.
    pub(crate) fn release(&mut self, epoch: u64, reply: Option<ReplyId>, now: Instant) {
        self.now = now;
        self.give_back_now(epoch, reply);
    }

    fn give_back_now(&mut self, epoch: u64, reply: Option<ReplyId>) {
        let Some(held) = self.holds.remove(epoch) else {
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
            self.timers.stop(&Timer::Expiry(epoch));
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
            None => self.waiters.streak_over(),
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
    /// [`MAX_HAND_OFF_STREAK`](crate::actors::name::MAX_HAND_OFF_STREAK) in a row, so that an
    /// ordinary release (and its message) lets other processes' waiters in; never with replica
    /// sync (a hand-off is a grant without the take's replica wait). A permit semaphore's permits carry leases and renewals of their
    /// own, and are always given back through Redis. A waiter whose attempt is under way may
    /// get its permits by itself, and one at its deadline is answered by its last attempt: not
    /// them.
    pub(super) fn hand_off(&mut self, permits: u32) -> Option<u32> {
        if self.kind != SyncKind::Semaphore
            || !self.waiters.may_hand_off()
            || !self.settings.hand_off
        {
            return None;
        }
        let at = self.waiters.hand_off_to(permits)?;
        let wants = self.waiters[at].wants;
        self.waiters.handed_off();
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
        for epoch in self.holds.epochs() {
            if release {
                self.give_back_now(epoch, None);
            } else {
                self.lose(epoch, Loss::Shutdown);
                self.holds.remove(epoch);
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
