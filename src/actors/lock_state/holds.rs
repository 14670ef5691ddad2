//! The holds of one lock name in this process: grants, lease expiry, the hand-over to the
//! Watchdog, loss and the end of a hold.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::actors::name::few::Few;

use super::timers::Timers;
use super::{Effect, HoldKey, LockState, Loss, Settings, Timer};

/// Every hold gets a number no other hold in this process had, so a stale guard can never
/// release a later hold of the same holder. Process-wide, not per state: a name's actor that
/// stopped after lingering is followed by a new one, and what outlives an actor must not mistake
/// a hold of the new one for one of the old: a `FencedLock` handle keeps its hold's newest token
/// by epoch (a stale guard would fence with a later hold's token), and the Watchdog, one per
/// manager, knows a hold by its name, holder, kind and epoch.
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1);

/// The share of the watchdog timeout a watchdog hold lives before the Watchdog renews it. Its
/// first renewal then comes at most 1/6 + 1/3 = 1/2 of the timeout after the grant, and the next
/// at 5/6: a renewal can still fail once without losing the lock (the PTTL ends at 6/6). With
/// holds watched (`Settings::watch_holds`) the hold is handed over [`WATCHED_AFTER`] after its
/// grant, and the Watchdog waits out the same share before it renews it (`watchdog/renewal.rs`).
pub(crate) const TRACK_AFTER: u32 = 6;

/// With holds watched (`Settings::watch_holds`), how long a watchdog hold lives before it is
/// handed to the Watchdog, which then checks it on the tracking connection at once: a loss is
/// known within this and a round trip or two from the grant on (before the hand-over, a `DEL`
/// is found by that first check). Holds that end sooner, most in a busy service, cost the
/// Watchdog nothing: no message, no check call, no allocation.
pub(crate) const WATCHED_AFTER: Duration = Duration::from_millis(20);

/// One hold: from the first grant to the final release or the loss.
#[derive(Debug)]
pub(super) struct Hold {
    pub count: u32,
    pub epoch: u64,
    /// Renewed by the watchdog (taken without a lease), or expiring by itself.
    pub watchdog: bool,
    /// Whether the Watchdog has it yet: a watchdog hold is handed over once it has lived
    /// [`WATCHED_AFTER`] when holds are watched (its loss is then known at once almost from the
    /// start), else [`TRACK_AFTER`] of the timeout, so the many holds that end sooner cost it
    /// nothing.
    pub tracked: bool,
    /// When Redis last set its PTTL to the full lease (the latest grant, first or re-entrant).
    pub granted: Instant,
    /// The lease restored when one of several holds is released.
    pub lease: Duration,
    /// When a lease hold ends unless renewed by a re-entry (`Timer::Expiry`).
    pub ends: Option<Instant>,
    /// Releases asked for but not confirmed by Redis (an error, or a reply that never came).
    /// `count` still includes them until settling the holder's count learns what happened.
    pub unreleased: u32,
}

impl Hold {
    /// The PTTL a release of one of several grants restores: the watchdog's lease, or what is
    /// left of a lease hold until its end (which no grant moves earlier: the whole hold lives
    /// as long as its longest lease). Never zero: a PEXPIRE of 0 would delete the key.
    pub(super) fn restored(&self, now: Instant) -> Duration {
        match self.ends {
            Some(ends) if !self.watchdog => ends
                .saturating_duration_since(now)
                .max(Duration::from_millis(1)),
            _ => self.lease,
        }
    }
}

/// The holds, one per holder and kind. Invariant: every hold counts at least one grant, and
/// its epoch is its own for as long as the process lives.
#[derive(Debug, Default)]
pub(super) struct Holds {
    by_key: Few<HoldKey, Hold>,
    /// Holds the Watchdog found gone while their own release was under way: the release's
    /// outcome decides (see [`LockState::hold_lost`]).
    gone_releasing: Vec<(HoldKey, u64)>,
}

impl Holds {
    /// The Watchdog found the hold of `key` and `epoch` gone while its own release was under
    /// way: the release's outcome decides ([`gone_released`](Self::gone_released)).
    pub(super) fn gone_releasing(&mut self, key: HoldKey, epoch: u64) {
        self.gone_releasing.push((key, epoch));
    }

    /// The holds found gone while their release was under way whose release is not any more
    /// (`releasing` says which still are): taken out, to be told lost if still here.
    pub(super) fn gone_released(
        &mut self,
        releasing: impl Fn(&HoldKey, u64) -> bool,
    ) -> Vec<(HoldKey, u64)> {
        if self.gone_releasing.is_empty() {
            return Vec::new();
        }
        let (still, released) = std::mem::take(&mut self.gone_releasing)
            .into_iter()
            .partition(|(key, epoch)| releasing(key, *epoch));
        self.gone_releasing = still;
        released
    }

    pub(super) fn get(&self, key: &HoldKey) -> Option<&Hold> {
        self.by_key.get(key)
    }

    /// The hold of `key`, if it is the one of `epoch`.
    pub(super) fn of(&self, key: &HoldKey, epoch: u64) -> Option<&Hold> {
        self.by_key.get(key).filter(|h| h.epoch == epoch)
    }

    /// The hold of `key`, if it is the one of `epoch`.
    pub(super) fn of_mut(&mut self, key: &HoldKey, epoch: u64) -> Option<&mut Hold> {
        self.by_key.get_mut(key).filter(|h| h.epoch == epoch)
    }

    pub(super) fn contains(&self, key: &HoldKey) -> bool {
        self.by_key.contains_key(key)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// How many grants the hold of `key` counts (0 with none).
    pub(super) fn count(&self, key: &HoldKey) -> u32 {
        self.by_key.get(key).map_or(0, |h| h.count)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&HoldKey, &Hold)> {
        self.by_key.iter()
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&HoldKey, &mut Hold)> {
        self.by_key.iter_mut()
    }

    #[cfg(test)]
    pub(super) fn values(&self) -> impl Iterator<Item = &Hold> {
        self.by_key.values()
    }

    /// One more grant of `key`'s hold, or a new hold with a new epoch: the hold. One lookup
    /// of the key (its holder's id hashed once), whether the hold is new or not; the caller
    /// goes on with the hold it returns, with no lookup of its own.
    pub(super) fn add(&mut self, key: &HoldKey, lease: Duration, started: Instant) -> &mut Hold {
        let (hold, new) = self.by_key.get_or_insert_with(key.clone(), || Hold {
            count: 1,
            epoch: NEXT_EPOCH.fetch_add(1, Ordering::Relaxed),
            watchdog: false,
            tracked: false,
            granted: started,
            lease,
            ends: None,
            unreleased: 0,
        });
        if !new {
            hold.count += 1;
            hold.granted = hold.granted.max(started);
        }
        hold
    }

    /// Whether no hold found gone during its release waits for that release's outcome.
    pub(super) fn none_gone_releasing(&self) -> bool {
        self.gone_releasing.is_empty()
    }

    /// Removes the hold of `key`, if it is the one of `epoch`: one lookup when it is (the
    /// release of a hold, every pair); a stale epoch's hold is put back as it was.
    pub(super) fn remove(&mut self, key: &HoldKey, epoch: u64) -> Option<Hold> {
        let (key, hold) = self.by_key.remove_entry(key)?;
        if hold.epoch == epoch {
            return Some(hold);
        }
        self.by_key.insert(key, hold);
        None
    }

    /// Removes every hold.
    pub(super) fn take_all(&mut self) -> impl Iterator<Item = (HoldKey, Hold)> + use<> {
        self.by_key.drain()
    }
}

#[cfg(test)]
impl<'a> IntoIterator for &'a Holds {
    type Item = (&'a HoldKey, &'a Hold);
    type IntoIter = Box<dyn Iterator<Item = (&'a HoldKey, &'a Hold)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.by_key.iter())
    }
}

impl LockState {
    /// Records a hold granted by Redis (a new one, or one more of a held one): its epoch, and
    /// what its guards' validity starts from (when Redis last set its PTTL, and the lease).
    pub(super) fn grant(
        &mut self,
        key: HoldKey,
        lease: Option<Duration>,
        started: Instant,
    ) -> (u64, (Instant, Duration)) {
        let watchdog = lease.is_none();
        let lease = lease.unwrap_or(self.settings.watchdog_timeout);
        let now = self.now;
        // One lookup of the key for the whole grant: the hold `add` returns is the one watched
        // or given its end.
        let hold = self.holds.add(&key, lease, started);
        if watchdog {
            watch_hold(hold, &mut self.timers, &key, &self.settings, now);
        } else {
            // The script just set the PTTL to this lease (it started no earlier than `started`),
            // or kept a longer one of the hold's (`attempt_ttl`): a re-entry never moves the
            // hold's end earlier, or an outer guard's hold would end before its own lease.
            let at = hold
                .ends
                .map_or(started + lease, |e| e.max(started + lease));
            expire_hold(hold, &mut self.timers, &key, (lease, at, now));
        }
        let granted = (hold.epoch, (hold.granted, hold.lease));
        self.set_busy();
        granted
    }

    /// Puts a hold under the watchdog (for good: it renews until the hold ends; again after
    /// a last release that left it in place).
    pub(super) fn watch(&mut self, key: &HoldKey) {
        if let Some(hold) = self.holds.by_key.get_mut(key) {
            watch_hold(hold, &mut self.timers, key, &self.settings, self.now);
        }
    }

    /// Hands the watchdog holds that have lived long enough to the Watchdog, and schedules the
    /// next hand-over while others are still too young.
    pub(super) fn track_due(&mut self) {
        let after = track_after(&self.settings);
        let mut next: Option<Duration> = None;
        for (key, hold) in self.holds.iter_mut() {
            if !hold.watchdog || hold.tracked {
                continue;
            }
            let age = self.now.saturating_duration_since(hold.granted);
            if age < after {
                next = Some(next.map_or(after - age, |n| n.min(after - age)));
                continue;
            }
            hold.tracked = true;
            self.out.push(Effect::Track {
                hold: key.clone(),
                epoch: hold.epoch,
                confirmed: hold.granted,
            });
        }
        if let Some(next) = next {
            self.timers.set(Timer::Track, self.now, next);
        }
    }

    /// A lease hold is lost when its lease runs out, since nobody renews it.
    pub(super) fn expire_at(&mut self, key: &HoldKey, lease: Duration, at: Instant) {
        let now = self.now;
        if let Some(hold) = self.holds.by_key.get_mut(key) {
            expire_hold(hold, &mut self.timers, key, (lease, at, now));
        }
    }

    /// The hold is gone from Redis: tell its guards, stop renewing it.
    pub(super) fn lose(&mut self, key: &HoldKey, epoch: u64, loss: Loss) {
        if let Some(hold) = self.end_hold(key, epoch, Some(loss)) {
            self.told_lost(key, &hold, loss);
        }
    }

    /// Logs the loss of `key`'s `hold`, which ended.
    pub(super) fn told_lost(&self, key: &HoldKey, hold: &Hold, loss: Loss) {
        let why = loss.describe();
        let (holder, kind) = (&key.0, key.1);
        if hold.watchdog {
            tracing::warn!(lock = %self.name, %holder, ?kind, why, "lock lost");
        } else {
            tracing::debug!(lock = %self.name, %holder, ?kind, why, "lease hold ended");
        }
    }

    /// Removes a hold (released, or `lost`) and its schedules.
    pub(super) fn end_hold(
        &mut self,
        key: &HoldKey,
        epoch: u64,
        lost: Option<Loss>,
    ) -> Option<Hold> {
        self.end_hold_by(key, epoch, |_| lost)
    }

    /// [`end_hold`](Self::end_hold), whether it is lost decided from the hold itself, taken out
    /// by the same lookup.
    pub(super) fn end_hold_by(
        &mut self,
        key: &HoldKey,
        epoch: u64,
        lost: impl FnOnce(&Hold) -> Option<Loss>,
    ) -> Option<Hold> {
        let hold = self.holds.remove(key, epoch)?;
        let lost = lost(&hold);
        // Only a lease hold has its expiry armed (`expire_at`; `watch` stops it).
        if !hold.watchdog {
            self.timers.stop(&Timer::Expiry(key.clone(), epoch));
        }
        // Unconfirmed releases of it, if any, end with it.
        self.timers.stop(&Timer::Settle(key.clone()));
        if hold.tracked {
            self.out.push(Effect::Untrack {
                hold: key.clone(),
                epoch,
            });
        }
        self.out.push(match lost {
            Some(loss) => Effect::Lost(epoch, loss),
            None => Effect::Ended(epoch),
        });
        if self.trips.is_abandoned(key) {
            // Its holder's count was to be settled, by settling this hold, which
            // cannot run now: settled as the holder's, to what this actor still grants.
            self.settle(key.clone());
        } else {
            self.trips.settle_over(key);
        }
        Some(hold)
    }
}

/// How long a watchdog hold lives, under `settings`, before it goes to the Watchdog.
fn track_after(settings: &Settings) -> Duration {
    if settings.watch_holds {
        WATCHED_AFTER.min(settings.watchdog_timeout / TRACK_AFTER)
    } else {
        settings.watchdog_timeout / TRACK_AFTER
    }
}

/// [`LockState::watch`] of `hold` (`key`'s), under `settings`, at `now`.
fn watch_hold(
    hold: &mut Hold,
    timers: &mut Timers,
    key: &HoldKey,
    settings: &Settings,
    now: Instant,
) {
    // Only a hold given an end has its expiry armed (`expire_hold`): a new hold's grant (every
    // pair's) has no timer to stop, and makes no `Timer` of its key.
    if !hold.watchdog && hold.ends.is_some() {
        timers.stop(&Timer::Expiry(key.clone(), hold.epoch));
    }
    hold.lease = settings.watchdog_timeout;
    hold.watchdog = true;
    // `Track` carries no data: its variant armed is it armed (no hash of it, every grant); the
    // hand-over's age is worked out only when it is armed.
    if !hold.tracked && !timers.is_armed_kind(&Timer::Track) {
        timers.set(Timer::Track, now, track_after(settings));
    }
}

/// [`LockState::expire_at`] of `hold` (`key`'s): its `lease` ends `at`, and it is `now`.
fn expire_hold(
    hold: &mut Hold,
    timers: &mut Timers,
    key: &HoldKey,
    (lease, at, now): (Duration, Instant, Instant),
) {
    if hold.watchdog {
        return;
    }
    hold.lease = lease;
    hold.ends = Some(at);
    let after = at.saturating_duration_since(now);
    timers.set(Timer::Expiry(key.clone(), hold.epoch), now, after);
}
