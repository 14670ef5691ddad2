//! [`LostSignal`]: what a grant of a lock or of permits carries to say that its hold is gone,
//! and until when it is guaranteed ([`Validity`]) — the one thing the handles share with the
//! actors besides messages.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

/// The share of a TTL allowed for clock drift between this process and Redis, as RedLock's
/// validity rule states it: 1 % of the TTL, plus [`DRIFT_FLOOR`].
const DRIFT_PERCENT: u32 = 100;
/// The fixed part of the drift allowance.
const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// What Redis last confirmed of a hold: the instant the confirming call (the acquire, a
/// re-entry or a renewal) was *sent*, and the TTL it set. The call ran no earlier than it was
/// sent, so the key lives at least until `sent + ttl` by Redis's clock.
///
/// `sent` is monotonic (`Instant`), which on Linux stands still while the host is suspended
/// while Redis's TTL runs on; `wall` is the same instant by the system clock, which a suspend
/// does not stop. `scope` stops at whichever of the two clocks says the hold may be gone first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Confirmed {
    pub sent: Instant,
    pub wall: SystemTime,
    pub ttl: Duration,
}

impl Confirmed {
    /// What the hold is guaranteed for after `sent`: the TTL less the drift allowance.
    fn guaranteed(&self) -> Duration {
        let drift = self.ttl / DRIFT_PERCENT + DRIFT_FLOOR;
        self.ttl.saturating_sub(drift)
    }

    /// The latest instant the hold is still guaranteed: `sent + ttl`, less the drift allowance.
    pub(crate) fn valid_until(&self) -> Instant {
        self.sent + self.guaranteed()
    }

    /// [`valid_until`](Self::valid_until) by the system clock: passed after a host suspend that
    /// the monotonic clock did not count (and early after a forward step of the system clock,
    /// which only stops a scope sooner).
    pub(crate) fn valid_until_wall(&self) -> SystemTime {
        self.wall + self.guaranteed()
    }
}

/// The sending side of a hold's validity: its per-name actor publishes each grant of the hold, the
/// Watchdog each renewal. Published values never go backwards.
///
/// It also counts the hold's **claims**: its grants not released or dropped yet. A hold whose
/// every grant is let go is being released and will be without its owner doing anything more, so
/// the waits-for graph no longer counts it as the owner's ([`Claim`]). A grant lets go in its
/// owner's task, before that task can wait for anything else: the graph never sees a stale claim.
#[derive(Clone, Debug)]
pub(crate) struct Validity(Arc<Shared>);

/// Whether a hold is still its owner's, for the waits-for graph: some grant of it is neither
/// released nor dropped. A hold let go is being released, and will be without its owner's
/// doing: it blocks nobody on the owner's account.
pub(crate) trait Claim: Send + Sync + std::fmt::Debug {
    fn is_claimed(&self) -> bool;
}

#[derive(Debug)]
struct Shared {
    confirmed: watch::Sender<Option<Confirmed>>,
    claims: AtomicU32,
}

impl Claim for Shared {
    fn is_claimed(&self) -> bool {
        self.claims.load(Ordering::Acquire) > 0
    }
}

impl Validity {
    /// A hold at its first grant: confirmed by a call sent at `sent` that set its TTL to `ttl`,
    /// or not confirmed yet (`None`; or never, for a hold that never expires: a plain
    /// semaphore's permits). Made confirmed rather than confirmed after: a watch's send wakes
    /// all its lists of waiters, though a new hold's cannot have any (callgrind).
    pub(crate) fn first(confirmed: Option<(Instant, Duration)>) -> Self {
        let confirmed = confirmed.map(|(sent, ttl)| Confirmed {
            sent,
            wall: wall_of(sent),
            ttl,
        });
        Self(Arc::new(Shared {
            confirmed: watch::channel(confirmed).0,
            claims: AtomicU32::new(0),
        }))
    }

    /// A grant of the hold was made: one claim more, until [`let_go`](Self::let_go).
    pub(crate) fn claim(&self) {
        self.0.claims.fetch_add(1, Ordering::Relaxed);
    }

    /// A grant of the hold was released or dropped.
    pub(crate) fn let_go(&self) {
        self.0.claims.fetch_sub(1, Ordering::Release);
    }

    /// The hold's claims, for the waits-for graph.
    pub(crate) fn claims(&self) -> Arc<dyn Claim> {
        self.0.clone()
    }

    /// Redis confirmed the hold by a call sent at `sent` that set its TTL to `ttl`; ignored
    /// when it guarantees less than what was already confirmed (a late reply of an older call).
    pub(crate) fn confirm(&self, sent: Instant, ttl: Duration) {
        self.confirm_at(sent, wall_of(sent), ttl);
    }

    /// As [`confirm`](Self::confirm), with the system clock's reading of `sent` given (tests
    /// stand a suspended host's clocks up with it).
    pub(crate) fn confirm_at(&self, sent: Instant, wall: SystemTime, ttl: Duration) {
        let new = Confirmed { sent, wall, ttl };
        self.0.confirmed.send_if_modified(|c| {
            if c.is_some_and(|c| c.valid_until() >= new.valid_until()) {
                return false;
            }
            *c = Some(new);
            true
        });
    }

    fn subscribe(&self) -> watch::Receiver<Option<Confirmed>> {
        self.0.confirmed.subscribe()
    }
}

/// The system clock's reading of `sent`: now, less the time since.
fn wall_of(sent: Instant) -> SystemTime {
    SystemTime::now()
        .checked_sub(sent.elapsed())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// The receiving side of a hold's lost signal and validity. Its actor sets it lost when the
/// hold is found gone (renewal, a lease's end, a release); an actor that stopped counts as a
/// loss too.
#[derive(Clone, Debug)]
pub(crate) struct LostSignal {
    lost: watch::Receiver<bool>,
    valid: watch::Receiver<Option<Confirmed>>,
}

impl LostSignal {
    pub(crate) fn new(rx: watch::Receiver<bool>, validity: &Validity) -> Self {
        Self {
            lost: rx,
            valid: validity.subscribe(),
        }
    }

    /// Whether the hold is known to be lost (or its actor stopped).
    pub(crate) fn is_lost(&self) -> bool {
        *self.lost.borrow() || self.lost.has_changed().is_err()
    }

    /// Resolves once the hold is known to be lost; never, while it is held.
    pub(crate) async fn wait(&self) {
        let mut lost = self.lost.clone();
        let _ = lost.wait_for(|lost| *lost).await;
    }

    /// What Redis last confirmed; `None` for a hold that never expires.
    pub(crate) fn confirmed(&self) -> Option<Confirmed> {
        *self.valid.borrow()
    }

    /// Resolves once the hold is lost or confirmed again.
    pub(crate) async fn changed(&self) {
        let mut valid = self.valid.clone();
        valid.mark_unchanged();
        let confirmed = async move {
            if valid.changed().await.is_err() {
                // Every sender gone (the hold ended): nothing will confirm it again. Waiting
                // here, inside the branch, keeps the loss branch alive: a hold's end drops the
                // senders as it raises the loss, and a select that picked this branch first
                // would otherwise never see the loss.
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = self.wait() => {}
            () = confirmed => {}
        }
    }
}
