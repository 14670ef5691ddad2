//! [`Semaphore`]: Redisson's RSemaphore.

use std::sync::Arc;
use std::time::Duration;

use super::{Handle, PermitGuard};
use crate::actors::messages::{Adjustment, Wait};
use crate::error::LockError;
use crate::handles::name::Name;
use crate::handles::state::Inner;
use crate::protocol::SyncKind;

/// A counting semaphore shared by every process, wire-compatible with Redisson's `RSemaphore`:
/// the key `name` holds the free permits, and each release publishes the new free count on
/// `redisson_sc:{name}`, which wakes up to that many waiters (in Java too).
///
/// Its permits have no owner and no lease: a process that dies holding some loses them for good
/// (as in Redisson). Where that matters, use a [`PermitSemaphore`](crate::PermitSemaphore).
///
/// ```no_run
/// # async fn demo(manager: lockman::LockManager) -> Result<(), lockman::LockError> {
/// let exports = manager.semaphore("exports:tenant-7");
/// exports.try_set_permits(3).await?;          // once, by whoever comes first
/// let permit = exports.acquire(1).await?;     // waits while 3 are out
/// // ... at most three of these run at once, across every process ...
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    handle: Handle,
}

impl Semaphore {
    pub(crate) fn new(mgr: Arc<Inner>, name: Name) -> Self {
        Self {
            handle: Handle::new(mgr, name, SyncKind::Semaphore),
        }
    }

    /// The semaphore's name as given, without the [name prefix](crate::Config::name_prefix).
    pub fn name(&self) -> &str {
        self.handle.name.given()
    }

    /// Its Redis key: the name with the [name prefix](crate::Config::name_prefix), from which
    /// its other keys and its channel are built.
    pub fn key(&self) -> &str {
        self.handle.name.key()
    }

    /// Sets the permits when the semaphore has none yet (the key is missing): whether it did.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for 0 permits or an empty name, [`LockError::WrongType`]
    /// when the key is not a semaphore, Redis errors.
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool, LockError> {
        Ok(self.handle.adjust(Adjustment::SetPermits(permits)).await? == 1)
    }

    /// Sets the permits when the semaphore has none yet, the key expiring after `ttl` (Redisson's
    /// `trySetPermits(permits, ttl)`, 3.29+: `SET name permits PX ttl`, and `permits` published):
    /// whether it did. When the key expires the semaphore is gone, as if never set; permits
    /// taken meanwhile are not given back to it by [`release_if_exists`](Self::release_if_exists).
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits), and [`LockError::InvalidArgument`] for a
    /// zero `ttl`.
    pub async fn try_set_permits_with_ttl(
        &self,
        permits: u32,
        ttl: Duration,
    ) -> Result<bool, LockError> {
        Ok(self
            .handle
            .adjust(Adjustment::SetPermitsWithTtl(permits, ttl))
            .await?
            == 1)
    }

    /// Gives `permits` permits back only when the semaphore's key exists (Redisson's
    /// `releaseIfExists`, 4.0+): whether it did. A semaphore that was deleted or expired (see
    /// [`try_set_permits_with_ttl`](Self::try_set_permits_with_ttl)) stays missing, where
    /// [`release`](Self::release) would create it. `permits` of 0 is `Ok(false)`, sending
    /// nothing, as in Redisson.
    ///
    /// # Errors
    /// [`LockError::WrongType`] when the key is not a semaphore, Redis errors.
    pub async fn release_if_exists(&self, permits: u32) -> Result<bool, LockError> {
        if permits == 0 {
            return Ok(false);
        }
        Ok(self
            .handle
            .adjust(Adjustment::ReleaseIfExists(permits))
            .await?
            == 1)
    }

    /// Adds permits (a negative `delta` removes them, down to below zero if need be): the new
    /// free count. Waiters are woken for what was added.
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits); a `delta` of 0 is refused.
    pub async fn add_permits(&self, delta: i64) -> Result<i64, LockError> {
        self.handle.adjust(Adjustment::AddPermits(delta)).await
    }

    /// The free permits (0 when the semaphore was never set).
    ///
    /// # Errors
    /// [`LockError::WrongType`], Redis errors.
    pub async fn available(&self) -> Result<i64, LockError> {
        self.handle.read().await
    }

    /// Takes every free permit: how many there were.
    ///
    /// # Errors
    /// As [`available`](Self::available).
    pub async fn drain(&self) -> Result<i64, LockError> {
        self.handle.adjust(Adjustment::Drain).await
    }

    /// Takes `permits` permits, waiting as long as it takes.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for 0 permits, [`LockError::WrongType`],
    /// [`LockError::Shutdown`]. Redis errors are retried while waiting; a wait that ends with Redis away
    /// fails with [`LockError::Unavailable`] (at its deadline, or after
    /// [`Config::unavailable_after`](crate::Config::unavailable_after)): see
    /// [When Redis is away](crate#when-redis-is-away).
    ///
    /// # Cancel safety
    /// Dropping the future removes the waiter; permits taken after that are given back.
    pub async fn acquire(&self, permits: u32) -> Result<PermitGuard, LockError> {
        self.handle
            .acquire(permits, None, Wait::Forever)
            .await?
            .ok_or(LockError::Shutdown)
    }

    /// One attempt: the permits, or `None` when fewer are free.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), and any Redis error.
    pub async fn try_acquire(&self, permits: u32) -> Result<Option<PermitGuard>, LockError> {
        self.handle.acquire(permits, None, Wait::No).await
    }

    /// Waits up to `wait` for `permits` permits; `None` once `wait` has passed with
    /// it held ([`LockError::Unavailable`] when Redis was away instead: see
    /// [When Redis is away](crate#when-redis-is-away)).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire_for(
        &self,
        permits: u32,
        wait: Duration,
    ) -> Result<Option<PermitGuard>, LockError> {
        self.handle.acquire(permits, None, Wait::Up(wait)).await
    }

    /// Gives `permits` permits back (or adds them: a plain semaphore does not know who took
    /// what), as Redisson's `release(n)`: the new free count. Guards do this by themselves;
    /// this is for permits kept with [`PermitGuard::forget`], or taken by another client.
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits).
    pub async fn release(&self, permits: u32) -> Result<i64, LockError> {
        self.handle.adjust(Adjustment::Release(permits)).await
    }
}
