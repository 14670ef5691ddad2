//! [`FencedLock`]: the reentrant lock plus a token that grows with every acquisition.

use std::ops::Deref;
use std::time::Duration;

use super::{Lock, LockGuard};
use crate::error::LockError;

/// A reentrant lock whose every successful acquisition (re-entry included) returns a **token**
/// from the counter `redisson_lock_token:{name}`, strictly greater than every token handed out
/// before for that name, by any client.
///
/// A lock alone cannot stop a holder that paused (GC, swap, a long network stall) past its lease
/// from writing after someone else took over. Storage that remembers the highest token it has
/// seen can: it refuses a write carrying a smaller one. `examples/fenced.rs` does this with a Lua
/// "write if token ≥ stored token" on a Redis key.
///
/// All the verbs of [`Lock`] (through `Deref`); the acquiring ones return a [`FencedGuard`].
#[derive(Clone, Debug)]
pub struct FencedLock(Lock);

impl FencedLock {
    pub(crate) fn new(lock: Lock) -> Self {
        Self(lock)
    }

    /// As [`Lock::acquire`], with the acquisition's token.
    ///
    /// # Errors
    /// As [`Lock::acquire`].
    pub async fn acquire(&self) -> Result<FencedGuard, LockError> {
        self.0.acquire().await.map(FencedGuard)
    }

    /// As [`Lock::acquire_with_lease`], with the acquisition's token.
    ///
    /// # Errors
    /// As [`Lock::acquire_with_lease`].
    pub async fn acquire_with_lease(&self, lease: Duration) -> Result<FencedGuard, LockError> {
        self.0.acquire_with_lease(lease).await.map(FencedGuard)
    }

    /// As [`Lock::try_acquire`], with the acquisition's token.
    ///
    /// # Errors
    /// As [`Lock::try_acquire`].
    pub async fn try_acquire(&self) -> Result<Option<FencedGuard>, LockError> {
        Ok(self.0.try_acquire().await?.map(FencedGuard))
    }

    /// As [`Lock::try_acquire_for`], with the acquisition's token.
    ///
    /// # Errors
    /// As [`Lock::try_acquire_for`].
    pub async fn try_acquire_for(&self, wait: Duration) -> Result<Option<FencedGuard>, LockError> {
        Ok(self.0.try_acquire_for(wait).await?.map(FencedGuard))
    }

    /// As [`Lock::try_acquire_with_lease`], with the acquisition's token.
    ///
    /// # Errors
    /// As [`Lock::try_acquire_with_lease`].
    pub async fn try_acquire_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<FencedGuard>, LockError> {
        Ok(self
            .0
            .try_acquire_with_lease(wait, lease)
            .await?
            .map(FencedGuard))
    }
}

impl Deref for FencedLock {
    type Target = Lock;

    fn deref(&self) -> &Lock {
        &self.0
    }
}

impl From<FencedLock> for Lock {
    fn from(lock: FencedLock) -> Lock {
        lock.0
    }
}

/// One hold of a [`FencedLock`]: a [`LockGuard`] (through `Deref`) with its token.
#[must_use = "dropping a guard releases the lock at once"]
#[derive(Debug)]
pub struct FencedGuard(LockGuard);

impl FencedGuard {
    /// This acquisition's token: greater than every token handed out before for this name.
    pub fn token(&self) -> u64 {
        // Fenced acquisitions always carry one (see fenced_acquire.lua).
        self.0.token().unwrap_or_default()
    }

    /// Sets the Redis key `key` to `value` only if no token newer than this one was seen
    /// there: a **fenced write**. The newest token seen per key is kept in the hash
    /// `lockman_fence:{name}` (this lock's slot), checked and advanced in the same script as the
    /// write (`fenced_set.lua`). `Ok(false)`: refused, a newer holder wrote there already, so
    /// this hold is stale whatever its guard knows yet. A holder may write again with its own
    /// token. The decision is the store's: a guard not yet known lost is refused all the same.
    ///
    /// In a Redis Cluster `key` must be in the lock's slot (`{name}:…`, say); Redis refuses
    /// another slot (`CROSSSLOT`).
    ///
    /// # Errors
    /// [`LockError::Shutdown`] for a guard made from a bare [`Grant`](crate::Grant); Redis
    /// errors (`WRONGTYPE` when the fence hash is not a hash).
    pub async fn fenced_set(&self, key: &str, value: impl AsRef<[u8]>) -> Result<bool, LockError> {
        let manager = self.0.manager().ok_or(LockError::Shutdown)?;
        manager
            .commands
            .fenced_set(self.0.key(), (key, value.as_ref()), self.token())
            .await
    }

    /// As [`LockGuard::release`].
    ///
    /// # Errors
    /// As [`LockGuard::release`].
    pub async fn release(self) -> Result<(), LockError> {
        self.0.release().await
    }
}

impl Deref for FencedGuard {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.0
    }
}
