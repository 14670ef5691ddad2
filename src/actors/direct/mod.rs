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

mod hold;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::OwnedMutexGuard;

pub(crate) use hold::{BusyNames, DirectHold, Renewals};

use super::backoff;
use crate::error::LockError;
use crate::scripts::{Commands, LockKind};

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
    pub(crate) async fn turn(&self, trip: &Trip) -> (OwnedMutexGuard<Ops>, Result<(), LockError>) {
        let mut ops = self.ops.clone().lock_owned().await;
        let settled = match ops.unsettled {
            true => self.settle(&mut ops, trip).await,
            false => Ok(()),
        };
        (ops, settled)
    }

    /// Brings Redis's count of this holder down to its live direct holds.
    async fn settle(&self, ops: &mut Ops, trip: &Trip) -> Result<(), LockError> {
        let target = self.live.load(Ordering::Acquire);
        let Trip {
            commands,
            name,
            holder,
            lease,
            ..
        } = trip;
        let left = commands
            .settle_releases(LockKind::Reentrant, name, holder, target, *lease)
            .await?;
        if left > target {
            return Err(LockError::Timeout {
                op: "settle a release",
                after: *lease,
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
            let give_up = Instant::now() + trip.lease;
            let mut failures = 0;
            while Instant::now() < give_up {
                tokio::time::sleep(backoff(failures)).await;
                let mut ops = side.ops.lock().await;
                if !ops.unsettled {
                    return;
                }
                match side.settle(&mut ops, &trip).await {
                    Ok(()) => return,
                    Err(error) => {
                        let (name, holder) = (&trip.name, &trip.holder);
                        tracing::warn!(lock = %name, %holder, %error, "cannot settle a direct hold yet");
                    }
                }
                failures += 1;
            }
            // Stop trying: the count left over, if any, expires at most one lease after this
            // holder's last live hold ends (nothing renews it after that).
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

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(side: &Side) -> (u32, u32) {
        let c = side.counts.lock().unwrap();
        (c.actor, c.direct)
    }

    #[test]
    fn a_holder_takes_one_path_at_a_time() {
        let side = Arc::new(Side::default());
        // Idle and not busy: direct; a second request of the holder follows it there, even
        // when the name has become busy meanwhile.
        let first = side.choose(|| false);
        assert_eq!(first.path(), Path::Direct);
        let second = side.choose(|| true);
        assert_eq!(second.path(), Path::Direct);
        assert_eq!(counts(&side), (0, 2));
        drop((first, second));
        assert_eq!(counts(&side), (0, 0));
        // A busy name: the actor path, and the holder's next requests follow it there.
        let waiting = side.choose(|| true);
        assert_eq!(waiting.path(), Path::Actor);
        let next = side.choose(|| false);
        assert_eq!(next.path(), Path::Actor);
        drop((waiting, next));
        assert_eq!(counts(&side), (0, 0));
    }

    #[test]
    fn only_a_holders_sole_direct_request_moves_to_the_actor() {
        let side = Arc::new(Side::default());
        let mut alone = side.choose(|| false);
        assert!(alone.move_to_actor());
        assert_eq!(alone.path(), Path::Actor);
        assert_eq!(counts(&side), (1, 0));
        drop(alone);
        assert_eq!(counts(&side), (0, 0));

        let mut one = side.choose(|| false);
        let other = side.choose(|| false);
        assert!(!one.move_to_actor(), "another direct request is under way");
        assert_eq!(one.path(), Path::Direct);
        drop(other);
        assert!(one.move_to_actor());
        drop(one);
        assert_eq!(counts(&side), (0, 0));
    }

    #[test]
    fn an_unsettled_count_keeps_the_holder_direct() {
        let side = Arc::new(Side::default());
        side.count_direct(); // as `unsettled` does
        let mut next = side.choose(|| true);
        assert_eq!(
            next.path(),
            Path::Direct,
            "a busy name, but a count to settle first"
        );
        assert!(!next.move_to_actor());
        drop(next);
        side.done(Path::Direct); // settled
        assert_eq!(side.choose(|| true).path(), Path::Actor);
    }
}
