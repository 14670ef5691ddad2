//! [`CountDownLatch`]: Redisson's RCountDownLatch.

use std::sync::Arc;
use std::time::Duration;

use super::Handle;
use crate::actors::messages::{Adjustment, Wait};
use crate::error::LockError;
use crate::handles::name::Name;
use crate::handles::state::Inner;
use crate::protocol::SyncKind;

/// A count-down latch shared by every process, wire-compatible with Redisson's
/// `RCountDownLatch`: the key `name` holds the count (missing: 0, open), and reaching zero
/// publishes `0` on `redisson_countdownlatch__channel__{name}`, which opens every waiter.
///
/// In Redis Cluster a latch name must not hold `{`: Redisson always wraps the whole name in
/// braces for the channel, which would then hash to another slot than the key.
///
/// ```no_run
/// # async fn demo(manager: lockman::LockManager) -> Result<(), lockman::LockError> {
/// let ready = manager.count_down_latch("deploy-42:ready");
/// ready.try_set_count(3).await?;       // three services must report
/// ready.count_down().await?;           // ... each does this once ...
/// ready.wait().await?;                 // everyone waits for the third
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct CountDownLatch {
    handle: Handle,
}

impl CountDownLatch {
    pub(crate) fn new(mgr: Arc<Inner>, name: Name) -> Self {
        Self {
            handle: Handle::new(mgr, name, SyncKind::CountDownLatch),
        }
    }

    /// The latch's name as given, without the [name prefix](crate::Config::name_prefix).
    pub fn name(&self) -> &str {
        self.handle.name.given()
    }

    /// Its Redis key: the name with the [name prefix](crate::Config::name_prefix), from which
    /// its other keys and its channel are built.
    pub fn key(&self) -> &str {
        self.handle.name.key()
    }

    /// Sets the count when the latch is open (no count): whether it did.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for a count of 0, an empty name, or (in Redis Cluster) a
    /// name holding `{`; [`LockError::WrongType`] when the key is not a latch; Redis errors.
    pub async fn try_set_count(&self, count: u64) -> Result<bool, LockError> {
        Ok(self.handle.adjust(Adjustment::SetCount(count)).await? == 1)
    }

    /// Counts down once: the count left (0 when this opened the latch, and when it was open
    /// already, which changes nothing).
    ///
    /// # Errors
    /// As [`try_set_count`](Self::try_set_count).
    pub async fn count_down(&self) -> Result<i64, LockError> {
        Ok(self.handle.adjust(Adjustment::CountDown).await?.max(0))
    }

    /// The count (0: open).
    ///
    /// # Errors
    /// [`LockError::WrongType`], Redis errors.
    pub async fn count(&self) -> Result<i64, LockError> {
        self.handle.read().await
    }

    /// Waits until the latch is open.
    ///
    /// # Errors
    /// As [`try_set_count`](Self::try_set_count); [`LockError::Shutdown`] after shutdown.
    /// Redis errors are retried while waiting; a wait that ends with Redis away
    /// fails with [`LockError::Unavailable`] (at its deadline, or after
    /// [`Config::unavailable_after`](crate::Config::unavailable_after)): see
    /// [When Redis is away](crate#when-redis-is-away).
    ///
    /// # Cancel safety
    /// Dropping the future removes the waiter.
    pub async fn wait(&self) -> Result<(), LockError> {
        let open = self.handle.await_latch(Wait::Forever).await?;
        if open {
            Ok(())
        } else {
            Err(LockError::Shutdown)
        }
    }

    /// Waits up to `timeout` for the latch to open: whether it did (`false`: Redis answered that
    /// it is closed; [`LockError::Unavailable`] when Redis was away at the end: see
    /// [When Redis is away](crate#when-redis-is-away)).
    ///
    /// # Errors
    /// As [`wait`](Self::wait).
    ///
    /// # Cancel safety
    /// As [`wait`](Self::wait).
    pub async fn wait_for(&self, timeout: Duration) -> Result<bool, LockError> {
        self.handle.await_latch(Wait::Up(timeout)).await
    }
}
