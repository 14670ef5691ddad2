//! [`LostSignal`]: what a grant of a lock or of permits carries to say that its hold is gone,
//! and until when it is guaranteed ([`Validity`]) — the one thing the handles share with the
//! actors besides messages.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;

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
///
/// A hold's validity, claims and lost flag are one allocation ([`Shared`]), made at its first
/// grant: two watch channels and a shared count cost three, and a watch's every send and drop
/// walk its lists of waiters (callgrind: about 2 k instructions per uncontended pair).
#[derive(Clone, Debug)]
pub(crate) struct Validity(Arc<Shared>);

/// Whether a hold is still its owner's, for the waits-for graph: some grant of it is neither
/// released nor dropped. A hold let go is being released, and will be without its owner's
/// doing: it blocks nobody on the owner's account.
pub(crate) trait Claim: Send + Sync + std::fmt::Debug {
    fn is_claimed(&self) -> bool;
}

/// What a hold's actor, the Watchdog and the hold's guards share.
#[derive(Debug)]
struct Shared {
    /// Set once, never cleared: the hold is known lost (or ended).
    lost: AtomicBool,
    claims: AtomicU32,
    /// What Redis last confirmed (`None`: not confirmed yet, or never expires).
    confirmed: Mutex<Option<Confirmed>>,
    /// Bumped by every confirmation that moved `confirmed`: what [`LostSignal::changed`] waits
    /// for besides the loss.
    confirmations: AtomicU64,
    /// Set once, never cleared, by the first wait for the loss or a confirmation (`lost()`,
    /// `scope`, a leadership's watch): until then nobody can be waiting, and a loss or a
    /// confirmation wakes nobody (a wake-up takes the waiters' lock, about 160 instructions at
    /// every hold's end). Waiters set it before they make their `Notified`; it is read after
    /// the loss or confirmation is stored (all `SeqCst`): either the wake-up finds it set, or
    /// the waiter reads the loss (or confirmation) already stored.
    asked: AtomicBool,
    /// Wakes those waiting for the loss or a confirmation. It allocates nothing until a waiter
    /// registers; a `Notified` made before the flag is read sees every later notification, so
    /// a loss raised between the read and the wait is not missed.
    notify: Notify,
}

impl Claim for Shared {
    fn is_claimed(&self) -> bool {
        self.claims.load(Ordering::Acquire) > 0
    }
}

impl Shared {
    /// A hold's cells at its first grant (see [`Validity::first`]).
    fn first(confirmed: Option<(Instant, Duration)>) -> Self {
        let confirmed = confirmed.map(|(sent, ttl)| Confirmed {
            sent,
            wall: wall_of(sent),
            ttl,
        });
        Self {
            lost: AtomicBool::new(false),
            claims: AtomicU32::new(0),
            confirmed: Mutex::new(confirmed),
            confirmations: AtomicU64::new(0),
            asked: AtomicBool::new(false),
            notify: Notify::new(),
        }
    }

    /// Unshared cells of an ended hold made those of a new one, as [`first`](Self::first)
    /// makes them, field by field (not rebuilt and moved in). Its `notify` has no waiter:
    /// nobody else holds it.
    fn reset(&mut self, confirmed: Option<(Instant, Duration)>) {
        *self.lost.get_mut() = false;
        *self.claims.get_mut() = 0;
        *self
            .confirmed
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner) = confirmed.map(|(sent, ttl)| Confirmed {
            sent,
            wall: wall_of(sent),
            ttl,
        });
        *self.confirmations.get_mut() = 0;
        *self.asked.get_mut() = false;
    }

    /// Wakes every waiter, if anyone has ever waited (`asked`). Called after the loss or
    /// confirmation it tells of is stored.
    fn wake(&self) {
        if self.asked.load(Ordering::SeqCst) {
            self.notify.notify_waiters();
        }
    }

    fn confirmed(&self) -> Option<Confirmed> {
        *self
            .confirmed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Validity {
    /// A hold at its first grant: confirmed by a call sent at `sent` that set its TTL to `ttl`,
    /// or not confirmed yet (`None`; or never, for a hold that never expires: a plain
    /// semaphore's permits). (The actors make a hold's cells from its raiser: [`Raiser::first`].)
    #[cfg(test)]
    pub(crate) fn first(confirmed: Option<(Instant, Duration)>) -> Self {
        Self(Arc::new(Shared::first(confirmed)))
    }

    /// Redis confirmed the hold by a call sent at `sent` that set its TTL to `ttl`; ignored
    /// when it guarantees less than what was already confirmed (a late reply of an older call).
    pub(crate) fn confirm(&self, sent: Instant, ttl: Duration) {
        self.confirm_at(sent, wall_of(sent), ttl);
    }

    /// As [`confirm`](Self::confirm), with the system clock's reading of `sent` given (tests
    /// stand a suspended host's clocks up with it).
    pub(crate) fn confirm_at(&self, sent: Instant, wall: SystemTime, ttl: Duration) {
        Self::confirm_in(&self.0, sent, wall, ttl);
    }

    fn confirm_in(shared: &Shared, sent: Instant, wall: SystemTime, ttl: Duration) {
        let new = Confirmed { sent, wall, ttl };
        {
            let mut c = shared
                .confirmed
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if c.is_some_and(|c| c.valid_until() >= new.valid_until()) {
                return;
            }
            *c = Some(new);
        }
        shared.confirmations.fetch_add(1, Ordering::SeqCst);
        shared.wake();
    }

    /// The receiving side, for a grant of the hold.
    #[cfg(test)]
    pub(crate) fn signal(&self) -> LostSignal {
        LostSignal(self.0.clone())
    }

    /// The side that raises the loss, for the hold's actor: raised when it is dropped too.
    #[cfg(test)]
    pub(crate) fn raiser(&self) -> Raiser {
        Raiser(self.0.clone())
    }
}

/// The system clock's reading of `sent`: now, less the time since.
fn wall_of(sent: Instant) -> SystemTime {
    SystemTime::now()
        .checked_sub(sent.elapsed())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// A hold's cells that nobody holds any more, kept by its actor for its next hold (see
/// [`Raiser::end`]); reused only while nobody else holds them ([`Arc::get_mut`]).
#[derive(Debug, Default)]
pub(crate) struct Spare(Option<Arc<Shared>>);

/// What raises a hold's loss: kept by the hold's actor while the hold lasts. Dropped, it raises
/// the loss too: a hold whose actor let go of it (released, or the actor gone) reads as lost, as
/// a watch whose sender is gone did.
///
/// It is the actor's one handle on the hold's shared cells: the validity it confirms and hands
/// to the Watchdog, and the signals of the hold's grants, are made from it when needed.
#[derive(Debug)]
pub(crate) struct Raiser(Arc<Shared>);

impl Raiser {
    /// A hold's raiser at its first grant: see [`Validity::first`]. Its cells are the
    /// `spare` ones of an earlier hold when there are (one allocation less per hold).
    pub(crate) fn first(confirmed: Option<(Instant, Duration)>, spare: &mut Spare) -> Self {
        if let Some(mut cells) = spare.0.take()
            && let Some(unshared) = Arc::get_mut(&mut cells)
        {
            unshared.reset(confirmed);
            return Self(cells);
        }
        Self(Arc::new(Shared::first(confirmed)))
    }

    /// The hold ended (released): its loss raised as a drop raises it, and its cells kept in
    /// `spare` for the next hold when nobody else holds them any more (no guard, signal,
    /// claim or Watchdog's validity of it is left: none can read them again).
    pub(crate) fn end(self, spare: &mut Spare) {
        if Arc::strong_count(&self.0) == 1 && Arc::weak_count(&self.0) == 0 {
            spare.0 = Some(self.0.clone());
        }
    }

    /// The validity of the hold it raises the loss of (confirmed by each grant, and by the
    /// Watchdog's renewals).
    pub(crate) fn validity(&self) -> Validity {
        Validity(self.0.clone())
    }

    /// The receiving side, for a grant of the hold.
    pub(crate) fn signal(&self) -> LostSignal {
        LostSignal(self.0.clone())
    }

    /// As [`Validity::confirm`], without a handle of the validity made for it.
    pub(crate) fn confirm(&self, sent: Instant, ttl: Duration) {
        Validity::confirm_in(&self.0, sent, wall_of(sent), ttl);
    }

    /// The hold is known lost: its guards learn it at once (`is_lost` reads the flag; every
    /// `lost()` and `changed()` waiting is woken).
    pub(crate) fn raise(&self) {
        if !self.0.lost.swap(true, Ordering::SeqCst) {
            self.0.wake();
        }
    }
}

impl Drop for Raiser {
    fn drop(&mut self) {
        self.raise();
    }
}

/// The receiving side of a hold's lost signal and validity. Its actor sets it lost when the
/// hold is found gone (renewal, a lease's end, a release); an actor that stopped counts as a
/// loss too.
#[derive(Clone, Debug)]
pub(crate) struct LostSignal(Arc<Shared>);

impl LostSignal {
    /// A grant of the hold was made: one claim more, until [`let_go`](Self::let_go). A grant's
    /// signal is its claim too: one handle of the hold's cells per grant.
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

    /// Whether the hold is known to be lost (or its actor stopped).
    pub(crate) fn is_lost(&self) -> bool {
        self.0.lost.load(Ordering::SeqCst)
    }

    /// Resolves once the hold is known to be lost; never, while it is held.
    pub(crate) async fn wait(&self) {
        self.until(|| false).await;
    }

    /// Resolves once the hold is lost or `done` says so, read after every wake-up.
    async fn until(&self, done: impl Fn() -> bool) {
        // Before the first `Notified` is made: from now on every loss and confirmation wakes.
        // Read with `Acquire`: found set, the setter's store happens before this wait's reads.
        if !self.0.asked.load(Ordering::Acquire) {
            self.0.asked.store(true, Ordering::SeqCst);
        }
        loop {
            // Made before the flags are read: a notification between the read and the await
            // still wakes it.
            let notified = self.0.notify.notified();
            if self.is_lost() || done() {
                return;
            }
            notified.await;
        }
    }

    /// What Redis last confirmed; `None` for a hold that never expires.
    pub(crate) fn confirmed(&self) -> Option<Confirmed> {
        self.0.confirmed()
    }

    /// Resolves once the hold is lost or confirmed again (after this is first polled).
    pub(crate) async fn changed(&self) {
        let seen = self.0.confirmations.load(Ordering::SeqCst);
        self.until(|| self.0.confirmations.load(Ordering::SeqCst) != seen)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A generous bound for what must happen at once: only a hang reaches it.
    const HANG: Duration = Duration::from_secs(10);

    fn hold() -> (Validity, Raiser, LostSignal) {
        let validity = Validity::first(Some((Instant::now(), Duration::from_secs(30))));
        let raiser = validity.raiser();
        let signal = validity.signal();
        (validity, raiser, signal)
    }

    /// A loss is read at once by `is_lost`, and wakes every `lost()` and `changed()` already
    /// waiting, whatever task they wait in.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_loss_is_known_at_once_by_every_waiter() {
        let (_validity, raiser, signal) = hold();
        let mut waiting = Vec::new();
        for i in 0..8 {
            let signal = signal.clone();
            waiting.push(tokio::spawn(async move {
                if i % 2 == 0 {
                    signal.wait().await;
                } else {
                    signal.changed().await;
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!signal.is_lost());
        assert!(
            waiting.iter().all(|w| !w.is_finished()),
            "none resolves while held"
        );
        raiser.raise();
        assert!(signal.is_lost(), "read at once, before anything is awaited");
        for w in waiting {
            tokio::time::timeout(HANG, w)
                .await
                .expect("woken")
                .expect("ran");
        }
        // A wait begun after the loss resolves at once.
        tokio::time::timeout(HANG, signal.wait())
            .await
            .expect("at once");
    }

    /// A loss raised on another thread while a waiter reads the flag and goes to wait is
    /// never missed (the waiter registers before it reads).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_loss_raised_while_a_waiter_goes_to_wait_is_not_missed() {
        for _ in 0..3000 {
            let (_validity, raiser, signal) = hold();
            let waiter = tokio::spawn(async move { signal.wait().await });
            std::thread::spawn(move || raiser.raise());
            tokio::time::timeout(HANG, waiter)
                .await
                .expect("a loss raised during the wait's set-up was missed")
                .expect("ran");
        }
    }

    /// The actor's end of the signal dropped (the hold ended, or its actor is gone) reads as
    /// lost, as a watch whose sender was dropped did.
    #[tokio::test]
    async fn a_dropped_raiser_reads_as_lost() {
        let (validity, raiser, signal) = hold();
        let waiter = tokio::spawn({
            let signal = signal.clone();
            async move { signal.wait().await }
        });
        tokio::task::yield_now().await;
        drop(raiser);
        assert!(signal.is_lost());
        tokio::time::timeout(HANG, waiter)
            .await
            .expect("woken")
            .expect("ran");
        // The Watchdog's copy of the validity does not keep it held.
        drop(validity);
        assert!(signal.is_lost());
    }

    /// `changed()` resolves at a confirmation that moves the validity later, not at one that
    /// does not (a late reply of an older call), nor before.
    #[tokio::test]
    async fn changed_resolves_at_a_later_confirmation_only() {
        let sent = Instant::now();
        let validity = Validity::first(Some((sent, Duration::from_secs(30))));
        let _raiser = validity.raiser();
        let signal = validity.signal();
        let waiter = tokio::spawn({
            let signal = signal.clone();
            async move { signal.changed().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        validity.confirm(sent, Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiter.is_finished(),
            "an older confirmation changes nothing"
        );
        assert_eq!(
            signal.confirmed().map(|c| c.ttl),
            Some(Duration::from_secs(30))
        );
        validity.confirm(Instant::now(), Duration::from_secs(30));
        tokio::time::timeout(HANG, waiter)
            .await
            .expect("woken")
            .expect("ran");
        assert!(!signal.is_lost());
    }

    /// A loss raised before anyone ever waited (no wake-up taken then) is still read by
    /// `is_lost`, and every wait begun after it resolves at its first poll. (The break: a
    /// wait that relied on a wake-up the unasked loss skipped would hang here.)
    #[tokio::test]
    async fn a_loss_before_anyone_waited_is_known_when_asked() {
        let (_validity, raiser, signal) = hold();
        raiser.raise();
        assert!(signal.is_lost());
        assert!(
            tokio::time::timeout(Duration::ZERO, signal.wait())
                .await
                .is_ok(),
            "lost() after an unasked loss resolves at its first poll"
        );
        assert!(
            tokio::time::timeout(Duration::ZERO, signal.changed())
                .await
                .is_ok()
        );
    }

    /// A released hold's cells are reused for the next hold only when nobody holds them any
    /// more: a guard (or a leadership's copy of its signal) still kept reads the old hold as
    /// lost, whatever the next hold does. (The break: cells reused while a guard still holds
    /// them show that guard the next hold, not lost.)
    #[test]
    fn a_released_holds_cells_are_reused_only_when_unshared() {
        let ttl = Duration::from_secs(30);
        let mut spare = Spare::default();
        let first = Raiser::first(Some((Instant::now(), ttl)), &mut spare);
        let kept = first.signal();
        first.end(&mut spare);
        assert!(spare.0.is_none(), "cells a guard still holds are not kept");
        assert!(kept.is_lost());
        let second = Raiser::first(Some((Instant::now(), ttl)), &mut spare);
        assert!(!Arc::ptr_eq(&kept.0, &second.0));
        assert!(
            kept.is_lost(),
            "the next hold does not touch the old guard's"
        );

        let let_go = second.signal();
        let_go.claim();
        let_go.let_go();
        drop(let_go);
        let cells = Arc::as_ptr(&second.0);
        second.end(&mut spare);
        let sent = Instant::now();
        let third = Raiser::first(Some((sent, Duration::from_secs(5))), &mut spare);
        assert_eq!(Arc::as_ptr(&third.0), cells, "unshared cells are reused");
        let signal = third.signal();
        assert!(!signal.is_lost(), "reused cells start held");
        assert!(!signal.0.is_claimed());
        assert_eq!(
            signal.confirmed().map(|c| (c.sent, c.ttl)),
            Some((sent, Duration::from_secs(5)))
        );
        assert_eq!(signal.0.confirmations.load(Ordering::SeqCst), 0);
        assert!(!signal.0.asked.load(Ordering::SeqCst));
    }
}
