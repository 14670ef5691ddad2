//! [`FairLock`]: first come, first served, across processes.

use std::ops::Deref;

use super::Lock;

/// A reentrant lock that waiters acquire in the order they arrived, in every process: the queue
/// lives in Redis (protocol.md, "Fair lock"). A release wakes only the head of the queue, on its
/// own channel; the others stay asleep.
///
/// A waiter that gives up (its wait ran out, its future was dropped) leaves the queue at once and
/// delays nobody behind it. A live waiter's place is refreshed while it waits, however long; a
/// waiter whose process died keeps its place at most about two
/// [fair-lock place timeouts](crate::Config::fair_lock_place_timeout) (5 s by default), then the
/// queue skips it: nobody waits long behind a dead entry. `try_acquire` never joins the queue.
///
/// All the verbs of [`Lock`], through `Deref`.
#[derive(Clone, Debug)]
pub struct FairLock(Lock);

impl FairLock {
    pub(crate) fn new(lock: Lock) -> Self {
        Self(lock)
    }
}

impl Deref for FairLock {
    type Target = Lock;

    fn deref(&self) -> &Lock {
        &self.0
    }
}

impl From<FairLock> for Lock {
    fn from(lock: FairLock) -> Lock {
        lock.0
    }
}
