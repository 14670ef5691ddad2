//! One hold taken on the direct path, and what carries it to the Watchdog: [`DirectHold`], its
//! queue to the Watchdog ([`Renewals`]), and the index of names that have a lock actor
//! ([`BusyNames`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rustc_hash::FxHashSet;
use tokio::sync::watch;

use super::{InFlight, Path, Side, Trip};
use crate::error::LockError;
use crate::metrics::{self, Loss};
use crate::scripts::{LockKind, Released};

/// After this many holds are queued, the Watchdog is asked to drain the queue before its tick,
/// so that a busy manager's ended holds do not pile up for a whole renewal interval.
const DRAIN_EVERY: usize = 1024;

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
        let (ops, _) = self.side.turn(trip).await;
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

    /// Releases this hold in the background (a dropped guard, a release dropped midway).
    pub(crate) fn release_later(self: Arc<Self>) {
        let spawner = self.trip.spawner.clone();
        spawner.spawn(async move {
            let _ = self.release().await;
        });
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
            hold.release_later();
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

    pub(in crate::actors) fn insert(&self, name: Arc<str>) {
        if let Ok(mut names) = self.0.lock() {
            names.insert(name);
        }
    }

    pub(in crate::actors) fn remove(&self, name: &str) {
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
