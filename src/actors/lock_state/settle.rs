//! Settling a holder's count: the one door through which the state brings what Redis counts
//! for a holder back to what it grants, whatever made them differ (a request given up
//! unresolved, a lease ended here a little before Redis's copy, releases that went
//! unconfirmed). One round trip (`Op::Settle`, its target read from the hold at the time it is
//! sent), one timer (`Timer::Settle`), one backoff (`backoff`, by consecutive failures).

use super::trips::{Flight, Pending};
use super::*;

impl LockState {
    /// Settles `key`'s count next (the caller pumps), unless a settling of it is queued already.
    pub(super) fn settle(&mut self, key: HoldKey) {
        self.timers.stop(&Timer::Settle(key.clone()));
        if !self.trips.settle_queued(&key) {
            self.trips.queue(Pending::Settle { key });
        }
    }

    /// Settles `key`'s count after the backoff of its failed settlings so far, unless a
    /// settling of it is queued or armed already.
    pub(super) fn settle_later(&mut self, key: &HoldKey) {
        let timer = Timer::Settle(key.clone());
        if self.trips.settle_queued(key) || self.timers.is_armed(&timer) {
            return;
        }
        let failures = self.trips.settle_failures(key);
        self.timers.set(timer, self.now, backoff(failures));
    }

    /// Whether `key`'s count may differ from what this actor grants.
    pub(super) fn settle_due(&self, key: &HoldKey) -> bool {
        self.trips.is_abandoned(key) || self.holds.get(key).is_some_and(|h| h.unreleased > 0)
    }

    /// The settling of `key`: down to its hold's count less its unconfirmed releases, or to
    /// none without a hold. `None` when nothing is to be settled any more.
    #[cold]
    pub(super) fn settle_op(&mut self, key: HoldKey) -> Option<(Op, Flight)> {
        if !self.settle_due(&key) {
            return None;
        }
        let (target, lease, epoch) = match self.holds.get(&key) {
            Some(h) => (h.count - h.unreleased, h.restored(self.now), Some(h.epoch)),
            None => (0, self.settings.watchdog_timeout, None),
        };
        let op = Op::Settle {
            kind: key.1,
            holder: key.0.clone(),
            target,
            lease,
            lapsed: self.trips.is_lapsed(&key),
        };
        Some((op, Flight::Settle { key, epoch }))
    }

    /// A settling's outcome: Redis's count for the holder afterwards.
    #[cold]
    pub(super) fn settle_ran(
        &mut self,
        key: HoldKey,
        epoch: Option<u64>,
        res: Result<u32, LockError>,
    ) {
        let target = match epoch {
            None => 0,
            Some(epoch) => match self.holds.of(&key, epoch) {
                Some(hold) => hold.count - hold.unreleased,
                // The hold ended meanwhile: a settling it stood for was queued again when it
                // ended (`end_hold`).
                None => return,
            },
        };
        let name = self.name.clone();
        let holder = key.0.clone();
        match res {
            Err(error) => {
                tracing::warn!(lock = %name, %holder, %error, "could not settle a holder's count yet");
                self.settle_failed(key);
            }
            Ok(left) if left > target => {
                if let Some(hold) = epoch.and_then(|e| self.holds.of_mut(&key, e)) {
                    hold.count = left;
                    hold.unreleased = left - target;
                }
                tracing::warn!(lock = %name, %holder, left, target, "could not settle a holder's count yet");
                self.settle_failed(key);
            }
            Ok(0) => match epoch {
                // Redis counts none of the holds left here: the hold is gone.
                Some(epoch) if target > 0 => {
                    self.settled_ending(&key, |s| s.lose(&key, epoch, Loss::Unconfirmed));
                }
                Some(epoch) => {
                    tracing::debug!(lock = %name, %holder, "unconfirmed releases settled");
                    self.settled_ending(&key, |s| {
                        s.end_hold(&key, epoch, None);
                    });
                }
                None => self.settled(&key),
            },
            Ok(left) => {
                if let Some(hold) = epoch.and_then(|e| self.holds.of_mut(&key, e)) {
                    hold.count = left;
                    hold.unreleased = 0;
                }
                tracing::debug!(lock = %name, %holder, "unconfirmed releases settled");
                self.settled(&key);
            }
        }
    }

    fn settle_failed(&mut self, key: HoldKey) {
        self.trips.settle_failed(&key);
        self.settle_later(&key);
    }

    /// `key`'s count is what this actor grants again: its waiters may go on.
    pub(super) fn settled(&mut self, key: &HoldKey) {
        self.settled_ending(key, |_| {});
    }

    /// `key`'s count is settled, and `end` ends what ends with it (its hold) before its waiters
    /// go on: an attempt started by their wake-up expects the count the state then has, so that
    /// must be Redis's already.
    pub(super) fn settled_ending(&mut self, key: &HoldKey, end: impl FnOnce(&mut Self)) {
        let settling = self.trips.settled(key);
        end(self);
        self.timers.stop(&Timer::Settle(key.clone()));
        if settling {
            self.wake_all();
        }
    }
}
