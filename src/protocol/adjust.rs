//! [`Adjustment`]: what an [`Adjust`](crate::actix::Adjust) does to a synchronizer, which
//! kinds each applies to, and its one round trip (behind the request's [`SyncLatch`], so that
//! one sent again is counted once).

use super::commands::Commands;
use super::{SyncKind, SyncLatch};
use crate::error::LockError;

/// What an [`Adjust`](crate::actix::Adjust) does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Adjustment {
    /// Semaphores: set the permits when the semaphore has none. Replies 1 when set, 0 when it
    /// had a count already.
    SetPermits(u32),
    /// Plain semaphore: set the permits when the semaphore has none, its key expiring after
    /// the duration (Redisson's `trySetPermits(permits, ttl)`). Replies as `SetPermits`.
    SetPermitsWithTtl(u32, std::time::Duration),
    /// Plain semaphore: give back permits only when the semaphore's key exists (Redisson's
    /// `releaseIfExists`). Replies 1 when given back, 0 when the key is missing.
    ReleaseIfExists(u32),
    /// Semaphores: add permits (negative: remove). Replies the new free count.
    AddPermits(i64),
    /// Semaphores: take every free permit. Replies how many there were.
    Drain,
    /// Plain semaphore: give back permits taken earlier (or add them). Replies the new free
    /// count.
    Release(u32),
    /// Semaphores: the free permits (a permit semaphore reclaims expired permits first).
    Available,
    /// Permit semaphore: the permits held, by anyone (after reclaiming expired ones).
    Acquired,
    /// Count-down latch: set the count when the latch is open. Replies 1 when set, 0 when a
    /// count was set already.
    SetCount(u64),
    /// Count-down latch: count down once. Replies the count after it (0 or less: open).
    CountDown,
}

impl Adjustment {
    /// Refuses what makes no sense for `kind`, or bad numbers, before anything is sent.
    pub(crate) fn check(self, kind: SyncKind) -> Result<(), LockError> {
        let latch = kind == SyncKind::CountDownLatch;
        let fits = match self {
            Adjustment::SetCount(_) | Adjustment::CountDown => latch,
            Adjustment::Release(_)
            | Adjustment::SetPermitsWithTtl(..)
            | Adjustment::ReleaseIfExists(_) => kind == SyncKind::Semaphore,
            Adjustment::Acquired => kind == SyncKind::PermitSemaphore,
            _ => !latch,
        };
        if !fits {
            return Err(LockError::invalid(
                "operation",
                format!("{self:?} does not apply to a {}", kind.label()),
            ));
        }
        match self {
            Adjustment::SetPermits(0)
            | Adjustment::Release(0)
            | Adjustment::ReleaseIfExists(0)
            | Adjustment::SetPermitsWithTtl(0, _) => {
                Err(LockError::invalid("permits", "must be at least 1"))
            }
            Adjustment::SetPermitsWithTtl(_, ttl) if ttl.is_zero() => {
                Err(LockError::invalid("ttl", "must not be zero"))
            }
            Adjustment::AddPermits(0) => Err(LockError::invalid("permits", "must not be 0")),
            Adjustment::SetCount(0) => Err(LockError::invalid(
                "count",
                "must be at least 1 (a latch with no count is open)",
            )),
            _ => Ok(()),
        }
    }
}

impl Commands {
    /// Makes `adjustment` of synchronizer `name`, of `kind`, behind `latch`: Redis's reply,
    /// as a number (see each [`Adjustment`]).
    pub(crate) async fn adjust(
        &self,
        kind: SyncKind,
        name: &str,
        adjustment: Adjustment,
        latch: &SyncLatch,
    ) -> Result<i64, LockError> {
        match adjustment {
            Adjustment::SetPermits(n) => self
                .permits(kind, name, latch)
                .set(n, None)
                .await
                .map(i64::from),
            Adjustment::SetPermitsWithTtl(n, ttl) => self
                .permits(kind, name, latch)
                .set(n, Some(ttl))
                .await
                .map(i64::from),
            Adjustment::ReleaseIfExists(n) => {
                self.release_if_exists(name, n, latch).await.map(i64::from)
            }
            Adjustment::AddPermits(d) => self.add_permits(kind, name, d, latch).await,
            Adjustment::Drain => self.drain_permits(name, latch).await,
            Adjustment::Release(n) => self.permits(kind, name, latch).give(n, &[]).await,
            Adjustment::Available => self.count_permits(kind, name).await.map(|(free, _)| free),
            Adjustment::Acquired => self.count_permits(kind, name).await.map(|(_, held)| held),
            Adjustment::SetCount(c) => self.set_count(name, c, latch).await.map(i64::from),
            Adjustment::CountDown => self.count_down(name, latch).await,
        }
    }
}
