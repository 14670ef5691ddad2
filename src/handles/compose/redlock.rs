//! [`RedLock`]: a majority of N locks on independent Redis servers.

use std::time::Duration;

use super::{CompositeGuard, Plan, composite_verbs};
use crate::actors::messages::Wait;
use crate::error::LockError;
use crate::handles::lock::Lock;

/// Default [`RedLock::member_timeout`].
pub const DEFAULT_MEMBER_TIMEOUT: Duration = Duration::from_millis(100);

/// The Redlock algorithm over N locks, one per independent Redis server: the lock is held when a
/// majority, `N / 2 + 1`, of the members were taken **and** validity is left — the lease minus the
/// time acquiring took minus a clock-drift allowance (1 % of the lease + 2 ms). Each member's
/// attempt is bounded by [`member_timeout`](Self::member_timeout), and members are attempted
/// concurrently, so a slow or dead server costs at most that bound.
///
/// Without a lease, every member is renewed by its manager's watchdog, and the lock is lost when
/// fewer than a majority of members are still held. A failed attempt releases every member.
/// With a single member the quorum is 1: that lock, with validity accounting.
///
/// ```no_run
/// # async fn demo(servers: Vec<lockman::LockManager>) -> Result<(), lockman::LockError> {
/// let red = lockman::RedLock::new(servers.iter().map(|m| m.lock("job:nightly")).collect());
/// if let Some(guard) = red.try_acquire_with_lease(std::time::Duration::from_millis(200),
///                                                 std::time::Duration::from_secs(10)).await? {
///     let deadline = guard.validity_deadline(); // finish before this
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedLock {
    members: Vec<Lock>,
    member_timeout: Duration,
}

impl RedLock {
    /// A RedLock over `locks`, one per server. An empty list, or one naming the same lock (same
    /// server URL and name) twice, is refused with [`LockError::InvalidArgument`] when acquiring.
    pub fn new(locks: Vec<Lock>) -> Self {
        Self {
            members: locks,
            member_timeout: DEFAULT_MEMBER_TIMEOUT,
        }
    }

    /// The bound on one member's attempt: keep it small next to the lease.
    ///
    /// Default: [`DEFAULT_MEMBER_TIMEOUT`] (100 ms).
    pub fn member_timeout(mut self, timeout: Duration) -> Self {
        self.member_timeout = timeout;
        self
    }

    /// The members.
    pub fn members(&self) -> &[Lock] {
        &self.members
    }

    /// Holds needed: `members / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.members.len() / 2 + 1
    }

    fn plan(&self) -> Plan<'_> {
        Plan {
            members: &self.members,
            quorum: self.quorum(),
            member_timeout: Some(self.member_timeout),
            redlock: true,
        }
    }

    composite_verbs!();
}
