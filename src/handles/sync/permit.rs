//! [`PermitSemaphore`]: Redisson's RPermitExpirableSemaphore, with permits the watchdog renews.

use std::sync::Arc;
use std::time::Duration;

use super::{Handle, PermitGuard};
use crate::actors::messages::{Adjustment, ReleaseIds, Wait};
use crate::error::LockError;
use crate::handles::name::Name;
use crate::handles::state::Inner;
use crate::protocol::SyncKind;

/// A semaphore whose permits have ids and expire, wire-compatible with Redisson's
/// `RPermitExpirableSemaphore`: the key `name` holds the free permits and `{name}:timeout` the
/// held ones (16-byte ids, scored by their expiry in epoch ms).
///
/// Permits taken **without a lease** are renewed by the watchdog while their guard lives, like
/// locks: a process that dies gives them back within the watchdog timeout, and a guard whose
/// permits were reclaimed meanwhile (a long pause, Redis unreachable) reports them lost. Permits
/// taken **with a lease** expire after it. Expiry is judged by the Redis server's clock in
/// lockman's scripts, and by each Java client's own clock in Redisson's: a Java client whose
/// clock runs ahead of the server's reclaims lockman's permits that much early (docs/protocol.md).
///
/// ```no_run
/// # async fn demo(manager: lockman::LockManager) -> Result<(), lockman::LockError> {
/// let partner = manager.permit_semaphore("partner-api");
/// partner.try_set_permits(8).await?;
/// let permit = partner.acquire(1).await?;     // renewed while held
/// // ... call the partner; if this process dies, the permit comes back ...
/// assert!(!permit.is_lost());
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct PermitSemaphore {
    handle: Handle,
}

impl PermitSemaphore {
    pub(crate) fn new(mgr: Arc<Inner>, name: Name) -> Self {
        Self {
            handle: Handle::new(mgr, name, SyncKind::PermitSemaphore),
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

    /// Sets the permits when the semaphore has none yet: whether it did.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for 0 permits or an empty name, [`LockError::WrongType`]
    /// when a key is not a semaphore's, Redis errors.
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool, LockError> {
        Ok(self.handle.adjust(Adjustment::SetPermits(permits)).await? == 1)
    }

    /// Adds permits (a negative `delta` removes free ones): the new free count. A positive
    /// `delta` is published, as Redisson does, and wakes up to `delta` waiters here and in
    /// other processes, whatever each wants.
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits); a `delta` of 0 is refused.
    pub async fn add_permits(&self, delta: i64) -> Result<i64, LockError> {
        self.handle.adjust(Adjustment::AddPermits(delta)).await
    }

    /// The free permits, after giving back the expired ones.
    ///
    /// # Errors
    /// [`LockError::WrongType`], Redis errors.
    pub async fn available(&self) -> Result<i64, LockError> {
        self.handle.adjust(Adjustment::Available).await
    }

    /// The permits held by anyone, after giving back the expired ones.
    ///
    /// # Errors
    /// As [`available`](Self::available).
    pub async fn acquired(&self) -> Result<i64, LockError> {
        self.handle.adjust(Adjustment::Acquired).await
    }

    /// Takes every free permit: how many there were.
    ///
    /// # Errors
    /// As [`available`](Self::available).
    pub async fn drain(&self) -> Result<i64, LockError> {
        self.handle.adjust(Adjustment::Drain).await
    }

    /// How long the permit `id` (32 hex characters, as [`PermitGuard::ids`] gives them, or a
    /// Java client's id) has left, after giving back the expired permits (Redisson's
    /// `getLeaseTime`, 3.41+): `None` when it is not held (released, expired, or never taken).
    /// A lockman permit without a lease shows the time left until its next renewal is due.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an id that is not 32 hex characters,
    /// [`LockError::WrongType`], Redis errors.
    pub async fn lease_time(&self, id: &str) -> Result<Option<PermitLease>, LockError> {
        let id = parse_id(id)?;
        let mgr = &self.handle.mgr;
        mgr.check(&self.handle.name)?;
        let left = mgr
            .commands
            .permit_lease_time(self.handle.name.key(), &id)
            .await?;
        Ok(match left {
            -1 => Some(PermitLease::NoLease),
            ms if ms > 0 => Some(PermitLease::Expires(Duration::from_millis(
                ms.unsigned_abs(),
            ))),
            // 0: not held. (Below -1 cannot happen: expired permits were just reclaimed.)
            _ => None,
        })
    }

    /// Gives back the permits `ids` (32 hex characters each) all at once, or none of them
    /// (Redisson's `tryRelease(List)` / `release(List)`, 3.41+): `true` when all were given back,
    /// `false` when one of them was not held (released, expired or unknown) and nothing changed.
    /// The number given back is published, as Redisson does. For ids of guards of this process
    /// use [`PermitGuard::release`]; after this their guards find them gone.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for no ids or an id that is not 32 hex characters,
    /// [`LockError::WrongType`], Redis errors (after resending while the outcome was unknown).
    pub async fn release_ids<S: AsRef<str>>(&self, ids: &[S]) -> Result<bool, LockError> {
        let mut bytes = Vec::with_capacity(ids.len() * 16);
        for id in ids {
            bytes.extend_from_slice(&parse_id(id.as_ref())?);
        }
        let released = self
            .handle
            .send(ReleaseIds(Arc::from(bytes.into_boxed_slice())))
            .await?;
        Ok(released > 0)
    }

    /// Takes `permits` permits, waiting as long as it takes; the watchdog renews them while the
    /// guard lives.
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

    /// Takes `permits` permits for `lease`, waiting as long as it takes. No renewal: they
    /// expire after `lease`, and the guard then reports them lost.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), and [`LockError::InvalidArgument`] for a zero lease.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_with_lease(
        &self,
        permits: u32,
        lease: Duration,
    ) -> Result<PermitGuard, LockError> {
        self.handle
            .acquire(permits, Some(lease), Wait::Forever)
            .await?
            .ok_or(LockError::Shutdown)
    }

    /// One attempt (renewed permits): the guard, or `None` when fewer are free.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), and any Redis error.
    pub async fn try_acquire(&self, permits: u32) -> Result<Option<PermitGuard>, LockError> {
        self.handle.acquire(permits, None, Wait::No).await
    }

    /// Waits up to `wait` for `permits` renewed permits; `None` once `wait` has passed with
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

    /// Waits up to `wait` for `permits` permits taken for `lease`; `None` once `wait` has passed with
    /// it held ([`LockError::Unavailable`] when Redis was away instead: see
    /// [When Redis is away](crate#when-redis-is-away)).
    ///
    /// # Errors
    /// As [`acquire_with_lease`](Self::acquire_with_lease).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire_with_lease(
        &self,
        permits: u32,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<PermitGuard>, LockError> {
        self.handle
            .acquire(permits, Some(lease), Wait::Up(wait))
            .await
    }
}

/// How long a held permit has left ([`PermitSemaphore::lease_time`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PermitLease {
    /// It expires after this, by the Redis server's clock.
    Expires(Duration),
    /// A Java permit taken without a lease: it never expires (Redisson's `-1`).
    NoLease,
}

/// A permit id as Java shows it (32 hex characters) to its 16 bytes.
fn parse_id(id: &str) -> Result<[u8; 16], LockError> {
    let bad = || LockError::invalid("permit id", format!("{id:?} is not 32 hex characters"));
    if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte =
            u8::from_str_radix(id.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16).map_err(|_| bad())?;
    }
    Ok(out)
}
