//! [`FencedLock`]: the reentrant lock plus a token that grows with every acquisition.

use std::ops::Deref;
use std::sync::{Arc, Mutex};
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
pub struct FencedLock(Lock, Newest);

/// The newest token granted to a fenced lock's holder, with the epoch of the hold it belongs
/// to: shared by the handle's clones (one holder) and their guards, so that every guard of one
/// re-entrant hold fences with the hold's newest token. A re-entry takes a new token (as
/// Redisson's does); the outer guard's own token is then below the one the inner guard may
/// have written with, and would be refused though its hold never ended.
#[derive(Clone, Debug, Default)]
struct Newest(Arc<Mutex<(u64, u64)>>);

impl Newest {
    /// Records the token of a grant of hold `epoch`.
    fn granted(&self, epoch: u64, token: u64) {
        let mut newest = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if newest.0 == epoch {
            newest.1 = newest.1.max(token);
        } else {
            *newest = (epoch, token);
        }
    }

    /// The token a guard of hold `epoch` with its own `token` fences with: the hold's newest
    /// (a later hold's tokens are never used: its epoch differs).
    fn of(&self, epoch: u64, token: u64) -> u64 {
        let newest = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if newest.0 == epoch {
            newest.1.max(token)
        } else {
            token
        }
    }
}

impl FencedLock {
    pub(crate) fn new(lock: Lock) -> Self {
        Self(lock, Newest::default())
    }

    /// Wraps a guard of this lock, recording its token as its hold's newest.
    fn guard(&self, guard: LockGuard) -> FencedGuard {
        let guard = FencedGuard(guard, self.1.clone());
        self.1.granted(guard.0.epoch(), guard.token());
        guard
    }

    /// As [`Lock::acquire`], with the acquisition's token.
    ///
    /// # Errors
    /// As [`Lock::acquire`].
    #[track_caller]
    pub fn acquire(&self) -> impl Future<Output = Result<FencedGuard, LockError>> + '_ {
        let acquiring = self.0.acquire();
        async move { acquiring.await.map(|g| self.guard(g)) }
    }

    /// As [`Lock::acquire_with_lease`], with the acquisition's token.
    ///
    /// # Errors
    /// As [`Lock::acquire_with_lease`].
    #[track_caller]
    pub fn acquire_with_lease(
        &self,
        lease: Duration,
    ) -> impl Future<Output = Result<FencedGuard, LockError>> + '_ {
        let acquiring = self.0.acquire_with_lease(lease);
        async move { acquiring.await.map(|g| self.guard(g)) }
    }

    /// As [`Lock::try_acquire`], with the acquisition's token.
    ///
    /// # Errors
    /// As [`Lock::try_acquire`].
    #[track_caller]
    pub fn try_acquire(&self) -> impl Future<Output = Result<Option<FencedGuard>, LockError>> + '_ {
        let acquiring = self.0.try_acquire();
        async move { Ok(acquiring.await?.map(|g| self.guard(g))) }
    }

    /// As [`Lock::try_acquire_for`], with the acquisition's token.
    ///
    /// # Errors
    /// As [`Lock::try_acquire_for`].
    #[track_caller]
    pub fn try_acquire_for(
        &self,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<FencedGuard>, LockError>> + '_ {
        let acquiring = self.0.try_acquire_for(wait);
        async move { Ok(acquiring.await?.map(|g| self.guard(g))) }
    }

    /// As [`Lock::try_acquire_with_lease`], with the acquisition's token.
    ///
    /// # Errors
    /// As [`Lock::try_acquire_with_lease`].
    #[track_caller]
    pub fn try_acquire_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> impl Future<Output = Result<Option<FencedGuard>, LockError>> + '_ {
        let acquiring = self.0.try_acquire_with_lease(wait, lease);
        async move { Ok(acquiring.await?.map(|g| self.guard(g))) }
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
pub struct FencedGuard(LockGuard, Newest);

impl FencedGuard {
    /// This acquisition's token: greater than every token handed out before for this name.
    pub fn token(&self) -> u64 {
        // Fenced acquisitions always carry one (see fenced_acquire.lua).
        self.0.token().unwrap_or_default()
    }

    /// The token this guard's fenced writes carry: its hold's newest. A re-entry takes a new
    /// token, so while an inner guard of the same hold lives (or after it wrote), the outer
    /// guard writes with the inner one's: the hold is one, and a write of its outer guard is
    /// not stale. Equal to [`token`](Self::token) for a hold taken once.
    pub fn fence_token(&self) -> u64 {
        self.1.of(self.0.epoch(), self.token())
    }

    /// Sets the Redis key `key` to `value` only if no token newer than this one was seen
    /// there: a **fenced write**. The newest token seen per key is kept in the hash
    /// `lockman_fence:{name}` (this lock's slot), checked and advanced in the same script as the
    /// write (`fenced_set.lua`). `Ok(false)`: refused, a newer holder wrote there already, so
    /// this hold is stale whatever its guard knows yet. A holder may write again with its own
    /// token. The write carries [`fence_token`](Self::fence_token): the hold's newest, so
    /// every guard of a re-entrant hold may write. The decision is the store's: a guard not yet known lost is refused all the same.
    ///
    /// In a Redis Cluster `key` must be in the lock's slot (`{name}:…`, say); Redis refuses
    /// another slot (`CROSSSLOT`).
    ///
    /// # Errors
    /// [`LockError::Shutdown`] for a guard made from a bare [`Grant`](crate::actix::Grant); Redis
    /// errors (`WRONGTYPE` when the fence hash is not a hash).
    pub async fn fenced_set(&self, key: &str, value: impl AsRef<[u8]>) -> Result<bool, LockError> {
        let manager = self.0.manager().ok_or(LockError::Shutdown)?;
        manager
            .commands
            .fenced_set(self.0.key(), key, value.as_ref(), self.fence_token())
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
