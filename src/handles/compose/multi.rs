//! [`MultiLock`]: all of N locks, or none.

use std::time::Duration;

use super::{CompositeGuard, Plan, composite_verbs};
use crate::actors::messages::Wait;
use crate::error::LockError;
use crate::handles::lock::Lock;

/// All of several locks, possibly on different Redis servers, taken as one: an acquire succeeds
/// only when every member is held, and a failed attempt releases every member it took.
///
/// ```no_run
/// # async fn demo(a: lockman::LockManager, b: lockman::LockManager) -> Result<(), lockman::LockError> {
/// let both = lockman::MultiLock::new(vec![a.lock("account:1"), b.lock("account:2")]);
/// let guard = both.acquire().await?;
/// // ... move money between the two accounts ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MultiLock {
    members: Vec<Lock>,
}

impl MultiLock {
    /// A multi-lock over `locks`. An empty list, or one naming the same lock (same server URL
    /// and name) twice, is refused with [`LockError::InvalidArgument`] when acquiring.
    pub fn new(locks: Vec<Lock>) -> Self {
        Self { members: locks }
    }

    /// The members.
    pub fn members(&self) -> &[Lock] {
        &self.members
    }

    fn plan(&self) -> Plan<'_> {
        Plan {
            members: &self.members,
            quorum: self.members.len(),
            member_timeout: None,
            redlock: false,
        }
    }

    composite_verbs!();
}
