//! Holds taken without a lock actor: the uncontended path of a reentrant lock.
//!
//! A handle whose name has no lock actor in this manager sends the acquire script itself
//! (`lock::direct`), on the caller's runtime: no message, no hop to lockman's thread. What a lock
//! actor would keep for such a hold is here instead:
//!
//! - [`Side`]: one holder's two paths. A holder uses one path at a time (`Counts`), so that
//!   settling an acquire or release of unknown outcome against Redis's count can never take
//!   back a hold of the other path; and its direct round trips run one at a time (`ops`), as a
//!   lock actor's do.
//! - [`DirectHold`]: one hold, with its lost signal. The Watchdog renews it (it drains
//!   [`Renewals`] at each tick), reports its loss, and releases it at shutdown.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustc_hash::FxHashSet;
use tokio::sync::{OwnedMutexGuard, watch};

use crate::error::LockError;
use crate::metrics::{self, Loss};
use crate::scripts::{Commands, LockKind, Released};

/// After this many holds are queued, the Watchdog is asked to drain the queue before its tick,
/// so that a busy manager's ended holds do not pile up for a whole renewal interval.
pub(crate) const DRAIN_EVERY: usize = 1024;

/// Retry delays of a background settle.
const SETTLE_BACKOFF_MIN: Duration = Duration::from_millis(50);
const SETTLE_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Which path a holder's request takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    Actor,
    Direct,
}

/// One holder's direct side, shared by the clones of its handle.
#[derive(Default)]
pub(crate) struct Side {
    counts: Mutex<Counts>,
    /// Direct holds not yet released or lost: all counted in Redis. The target of a settle.
    live: AtomicU32,
    /// Held by every direct round trip of this holder: they never interleave.
    ops: Arc<tokio::sync::Mutex<Ops>>,
}

#[derive(Default)]
struct Counts {
    /// Requests on the actor path under way, and guards it granted still alive.
    actor: u32,
    /// Direct requests under way, live direct holds, and an unsettled count.
    direct: u32,
}

/// What only a holder's direct round trips touch (under its turn).
#[derive(Default)]
pub(crate) struct Ops {
    /// An acquire or release of unknown outcome: Redis's count may differ from `live` by one.
    unsettled: bool,
}

/// A request, or a guard, counted on one path of its holder until dropped.
pub(crate) struct Counted {
    side: Arc<Side>,
    path: Path,
}

impl Counted {
    pub(crate) fn path(&self) -> Path {
        self.path
    }

    /// A direct request that found the lock busy moves to the actor path, when its holder has
    /// nothing else direct: `false` when it has (it must not wait on the other path).
    pub(crate) fn move_to_actor(&mut self) -> bool {
        let Ok(mut counts) = self.side.counts.lock() else {
            return false;
        };
        if self.path != Path::Direct || counts.direct != 1 {
            return false;
        }
        counts.direct = 0;
        counts.actor += 1;
        self.path = Path::Actor;
        true
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.side.done(self.path);
    }
}

impl Side {
    /// Picks the path of a new request and counts it there: the direct one while this holder has
    /// anything direct, the actor one while it has anything there, else direct unless `busy`.
    pub(crate) fn choose(self: &Arc<Self>, busy: impl FnOnce() -> bool) -> Counted {
        let mut path = Path::Actor;
        if let Ok(mut counts) = self.counts.lock() {
            if counts.direct > 0 || (counts.actor == 0 && !busy()) {
                path = Path::Direct;
            }
            match path {
                Path::Direct => counts.direct += 1,
                Path::Actor => counts.actor += 1,
            }
        }
        Counted {
            side: self.clone(),
            path,
        }
    }

    fn count_direct(&self) {
        if let Ok(mut counts) = self.counts.lock() {
            counts.direct += 1;
        }
    }

    fn done(&self, path: Path) {
        if let Ok(mut counts) = self.counts.lock() {
            match path {
                Path::Direct => counts.direct = counts.direct.saturating_sub(1),
                Path::Actor => counts.actor = counts.actor.saturating_sub(1),
            }
        }
    }

    /// Takes this holder's turn for a direct round trip (after the one under way, each bounded
    /// by the response timeout), then settles an unknown outcome left by an earlier one.
    pub(crate) async fn turn(
        &self,
        cmds: &Commands,
        name: &str,
        holder: &str,
        lease: Duration,
    ) -> (OwnedMutexGuard<Ops>, Result<(), LockError>) {
        let mut ops = self.ops.clone().lock_owned().await;
        let settled = match ops.unsettled {
            true => self.settle(&mut ops, cmds, name, holder, lease).await,
            false => Ok(()),
        };
        (ops, settled)
    }

    /// Brings Redis's count of this holder down to its live direct holds.
    async fn settle(
        &self,
        ops: &mut Ops,
        cmds: &Commands,
        name: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<(), LockError> {
        let target = self.live.load(Ordering::Acquire);
        let left = cmds
            .settle_releases(LockKind::Reentrant, name, holder, target, lease)
            .await?;
        if left > target {
            return Err(LockError::Timeout {
                op: "settle a release",
                after: lease,
            });
        }
        ops.unsettled = false;
        // The unsettled count held this holder on the direct path.
        self.done(Path::Direct);
        Ok(())
    }

    /// A round trip of unknown outcome: the next one settles it first, and a background task
    /// tries until it is settled or the key has expired by itself. While it is unsettled, the
    /// holder stays on the direct path.
    pub(crate) fn unsettled(self: &Arc<Self>, ops: &mut Ops, trip: &Trip) {
        if ops.unsettled {
            return;
        }
        ops.unsettled = true;
        self.count_direct();
        let (side, trip) = (self.clone(), trip.clone());
        trip.spawner.clone().spawn(async move {
            let Trip {
                commands,
                name,
                holder,
                lease,
                ..
            } = trip;
            let give_up = Instant::now() + lease;
            let mut backoff = SETTLE_BACKOFF_MIN;
            while Instant::now() < give_up {
                tokio::time::sleep(backoff).await;
                let mut ops = side.ops.lock().await;
                if !ops.unsettled {
                    return;
                }
                match side.settle(&mut ops, &commands, &name, &holder, lease).await {
                    Ok(()) => return,
                    Err(error) => {
                        tracing::warn!(lock = %name, %holder, %error, "cannot settle a direct hold yet");
                    }
                }
                backoff = (backoff * 2).min(SETTLE_BACKOFF_MAX);
            }
            // Whatever it was, the key has expired by now: nothing is counted any more.
            let mut ops = side.ops.lock().await;
            if ops.unsettled {
                ops.unsettled = false;
                side.done(Path::Direct);
            }
        });
    }
}

/// What a direct round trip of one holder on one name needs, and a settle after it.
#[derive(Clone)]
pub(crate) struct Trip {
    pub commands: Commands,
    pub name: Arc<str>,
    pub holder: Arc<str>,
    /// The watchdog timeout: the lease of a direct hold.
    pub lease: Duration,
    /// Where background work runs (there may be no runtime where a guard is dropped).
    pub spawner: actix_rt::ArbiterHandle,
}

/// A round trip under way, holding its holder's turn. Dropped before [`land`](Self::land) (its
/// caller went away), its outcome is unknown: it is settled like an error of unknown outcome.
pub(crate) struct InFlight<'a> {
    ops: Option<OwnedMutexGuard<Ops>>,
    side: &'a Arc<Side>,
    trip: &'a Trip,
}

impl<'a> InFlight<'a> {
    pub(crate) fn new(ops: OwnedMutexGuard<Ops>, side: &'a Arc<Side>, trip: &'a Trip) -> Self {
        Self {
            ops: Some(ops),
            side,
            trip,
        }
    }

    /// The round trip finished: the turn, still held.
    pub(crate) fn land(mut self) -> Option<OwnedMutexGuard<Ops>> {
        self.ops.take()
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(mut ops) = self.ops.take() {
            self.side.unsettled(&mut ops, self.trip);
        }
    }
}

/// One hold taken on the direct path.
pub(crate) struct DirectHold {
    pub trip: Trip,
    pub side: Arc<Side>,
    pub taken: Instant,
    /// When Redis last confirmed it (the grant, or a renewal): the Watchdog's to update.
    pub confirmed: Mutex<Instant>,
    lost: watch::Sender<bool>,
    /// Released, lost or released at shutdown: whoever sets it first ends the hold's count.
    ended: AtomicBool,
    /// Released at shutdown: a later release says so.
    shut: AtomicBool,
}

impl DirectHold {
    /// A new live hold (counted in `side`), and its lost signal.
    pub(crate) fn new(
        trip: Trip,
        side: Arc<Side>,
        taken: Instant,
    ) -> (Arc<Self>, watch::Receiver<bool>) {
        side.live.fetch_add(1, Ordering::AcqRel);
        side.count_direct();
        metrics::holds(LockKind::Reentrant, 1.0);
        let (lost, rx) = watch::channel(false);
        let hold = Self {
            trip,
            side,
            taken,
            confirmed: Mutex::new(taken),
            lost,
            ended: AtomicBool::new(false),
            shut: AtomicBool::new(false),
        };
        (Arc::new(hold), rx)
    }

    pub(crate) fn name(&self) -> &Arc<str> {
        &self.trip.name
    }

    pub(crate) fn holder(&self) -> &Arc<str> {
        &self.trip.holder
    }

    pub(crate) fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Ends the hold's count once; `true` for the caller that ended it.
    fn end(&self) -> bool {
        if self.ended.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.side.live.fetch_sub(1, Ordering::AcqRel);
        self.side.done(Path::Direct);
        metrics::holds(LockKind::Reentrant, -1.0);
        true
    }

    /// The hold is gone from Redis (found by a renewal, or not renewable for a whole timeout):
    /// its guards learn it.
    pub(crate) fn lose(&self) {
        if self.end() {
            self.lost.send_replace(true);
            metrics::lost(LockKind::Reentrant, Loss::Watchdog);
            tracing::warn!(lock = %self.trip.name, holder = %self.trip.holder, "direct hold lost");
        }
    }

    /// Releases this hold (one count) after the holder's direct round trips under way. Dropped
    /// before it sent the script, the release goes on in the background; dropped while the
    /// script is under way, it is settled.
    pub(crate) async fn release(self: Arc<Self>) -> Result<(), LockError> {
        let pending = Pending(Some(self.clone()));
        let trip = &self.trip;
        // A settle that fails here is tried again later; this release goes ahead either way.
        let (ops, _) = self
            .side
            .turn(&trip.commands, &trip.name, &trip.holder, trip.lease)
            .await;
        pending.disarm();
        // From here the hold is not counted as live: a settle brings Redis down to the others.
        if !self.end() {
            return Err(self.not_held());
        }
        let flight = InFlight::new(ops, &self.side, trip);
        let res = trip
            .commands
            .release(LockKind::Reentrant, &trip.name, &trip.holder, trip.lease)
            .await;
        let Some(mut ops) = flight.land() else {
            return Err(LockError::Shutdown);
        };
        match res {
            Ok(Released::StillHeld | Released::Unlocked) => Ok(()),
            Ok(Released::NotHeld) => {
                self.lost.send_replace(true);
                metrics::lost(LockKind::Reentrant, Loss::Release);
                Err(self.not_held())
            }
            Err(e) => {
                // It may or may not have run (or did not, and the hold is no longer renewed):
                // settled in the background either way.
                self.side.unsettled(&mut ops, trip);
                Err(e)
            }
        }
    }

    fn not_held(&self) -> LockError {
        if self.shut.load(Ordering::Acquire) {
            return LockError::Shutdown;
        }
        LockError::NotHeld {
            name: self.trip.name.to_string(),
            holder: self.trip.holder.to_string(),
        }
    }

    /// Releases the holder's whole count at shutdown, whatever it is.
    pub(crate) async fn release_at_shutdown(self: Arc<Self>) {
        self.shut.store(true, Ordering::Release);
        if !self.end() {
            return;
        }
        self.lost.send_replace(true);
        let trip = &self.trip;
        let res = trip
            .commands
            .settle_releases(LockKind::Reentrant, &trip.name, &trip.holder, 0, trip.lease)
            .await;
        if !matches!(res, Ok(0)) {
            tracing::warn!(lock = %trip.name, holder = %trip.holder, "release at shutdown failed");
        }
    }
}

/// A release dropped while it waited for its turn: it goes on in the background.
struct Pending(Option<Arc<DirectHold>>);

impl Pending {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(hold) = self.0.take() {
            let spawner = hold.trip.spawner.clone();
            spawner.spawn(async move {
                let _ = hold.release().await;
            });
        }
    }
}

/// The names that have a lock actor of the reentrant family in this manager: written by the
/// Registry, read by handles to choose their path (a busy name's requests queue at its actor).
#[derive(Clone, Default)]
pub(crate) struct BusyNames(Arc<Mutex<FxHashSet<Arc<str>>>>);

impl BusyNames {
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.0.lock().map_or(true, |names| names.contains(name))
    }

    pub(super) fn insert(&self, name: Arc<str>) {
        if let Ok(mut names) = self.0.lock() {
            names.insert(name);
        }
    }

    pub(super) fn remove(&self, name: &str) {
        if let Ok(mut names) = self.0.lock() {
            names.remove(name);
        }
    }
}

/// Direct holds on their way to the Watchdog: pushed by handles, drained at each tick.
#[derive(Clone, Default)]
pub(crate) struct Renewals {
    queue: Arc<Mutex<Vec<Arc<DirectHold>>>>,
}

impl Renewals {
    /// Queues a new hold; `true` when the Watchdog should drain the queue now.
    pub(crate) fn push(&self, hold: Arc<DirectHold>) -> bool {
        let Ok(mut queue) = self.queue.lock() else {
            return false;
        };
        queue.push(hold);
        queue.len() % DRAIN_EVERY == 0
    }

    pub(crate) fn drain(&self) -> Vec<Arc<DirectHold>> {
        match self.queue.lock() {
            Ok(mut queue) => std::mem::take(&mut *queue),
            Err(_) => Vec::new(),
        }
    }
}
