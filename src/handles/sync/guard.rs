//! [`PermitGuard`]: permits held, given back when dropped.

use std::sync::Arc;

use crate::actors::sync_actor::Permits;
use crate::actors::sync_actor::ReleasePermits;
use tracing::Instrument;

use crate::error::LockError;
use crate::handles::scope::Watched;
use crate::handles::state::Inner;

/// Permits of a [`Semaphore`](crate::Semaphore) or a [`PermitSemaphore`](crate::PermitSemaphore).
/// Dropping it gives them back in the background; [`release`](Self::release) does it and says
/// how it went. A permit semaphore's permits taken without a lease are renewed by the watchdog
/// while the guard lives.
#[must_use = "dropping the guard gives the permits back at once"]
pub struct PermitGuard {
    permits: Permits,
    /// Keeps the manager (and its actors) alive while permits are held.
    manager: Arc<Inner>,
}

impl PermitGuard {
    pub(super) fn new(permits: Permits, manager: Arc<Inner>) -> Self {
        Self { permits, manager }
    }

    /// The semaphore's name as given, without the [name prefix](crate::Config::name_prefix).
    pub fn name(&self) -> &str {
        self.manager.unmap_name(self.permits.name())
    }

    /// How many permits it holds.
    pub fn count(&self) -> u32 {
        self.permits.count()
    }

    /// A permit semaphore's permit ids, as Java shows them (32 lowercase hex characters).
    pub fn ids(&self) -> Vec<String> {
        self.permits.ids()
    }

    /// Whether the permits are known to be lost (their lease ran out, or renewal found them
    /// reclaimed). Lost permits may be in another holder's hands: stop relying on them.
    pub fn is_lost(&self) -> bool {
        self.permits.is_lost()
    }

    /// Resolves once the permits are known to be lost; never, while they are held.
    pub async fn lost(&self) {
        self.permits.lost().await;
    }

    /// The latest instant (monotonic clock) at which the permits are still guaranteed: when
    /// the take or renewal Redis last confirmed was sent, plus the TTL it set, minus 1 % of it
    /// and 2 ms. `None` for a plain [`Semaphore`](crate::Semaphore)'s permits, which never
    /// expire.
    pub fn valid_until(&self) -> Option<std::time::Instant> {
        self.permits.valid_until()
    }

    /// Runs `fut` while the hold is held and guaranteed, and drops it (so its work stops at
    /// its next await) as soon as the hold is known lost or its [`valid_until`](Self::valid_until) comes
    /// within a margin — a tenth of the hold's TTL — with no renewal confirmed since.
    ///
    /// # Errors
    /// [`LockError::HoldLost`] or [`LockError::HoldExpiring`], saying which stopped the work.
    /// Either way the guard is still there to release (or drop).
    pub async fn scope<F: std::future::Future>(&self, fut: F) -> Result<F::Output, LockError> {
        self.watched(None).run(fut).await
    }

    /// As [`scope`](Self::scope), stopping the work `margin` before [`valid_until`](Self::valid_until)
    /// instead of a tenth of the TTL before.
    ///
    /// # Errors
    /// As [`scope`](Self::scope).
    pub async fn scope_with_margin<F: std::future::Future>(
        &self,
        margin: std::time::Duration,
        fut: F,
    ) -> Result<F::Output, LockError> {
        self.watched(Some(margin)).run(fut).await
    }

    fn watched(&self, margin: Option<std::time::Duration>) -> Watched<'_> {
        Watched {
            name: self.name(),
            holds: vec![self.permits.signal()],
            quorum: 1,
            deadline: None,
            margin,
        }
    }

    /// Gives the permits back and waits for Redis to confirm.
    ///
    /// # Errors
    /// [`LockError::NotHeld`] when a permit semaphore's permits were lost meanwhile (those still
    /// held are given back all the same); Redis errors, after resending while the outcome was
    /// unknown.
    pub async fn release(self) -> Result<(), LockError> {
        let span = crate::handles::trace::release(self.permits.name(), &self.permits.kind());
        let actor = self.permits.actor().clone();
        let res = actor
            .send(ReleasePermits(self.permits))
            .instrument(span.clone())
            .await
            .unwrap_or(Err(LockError::Shutdown));
        crate::handles::trace::released(&span, &res);
        res
    }

    /// Keeps the permits taken after the guard is gone: nothing gives them back (a plain
    /// semaphore's are then given back with [`Semaphore::release`](crate::Semaphore::release),
    /// by anyone, as in Redisson). A permit semaphore's permits taken without a lease are then no
    /// longer renewed either, and expire within the watchdog timeout.
    pub fn forget(self) {
        self.permits.forget();
    }

    /// The actor's grant, for actix users.
    pub fn into_permits(self) -> Permits {
        self.permits
    }
}

impl std::fmt::Debug for PermitGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.permits.fmt(f)
    }
}
