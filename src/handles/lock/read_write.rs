//! [`ReadWriteLock`]: many readers at once, or one writer.

use std::ops::Deref;

use super::Lock;
use crate::protocol::LockKind;

/// A read-write lock: one Redis hash for both sides (protocol.md, "Read-write lock"). Many
/// readers may hold it at once, or one writer. Its two sides share one holder, so a holder of the
/// write side may also take the read side (**downgrade**); a reader cannot take the write side
/// (**upgrade**): that attempt waits like any other writer, or fails after its wait time.
///
/// Each read hold has its own lease (a timeout key); the hash lives as long as the longest of
/// them. A writer's final release wakes every waiter in this process at once; a reader's wakes one.
#[derive(Clone, Debug)]
pub struct ReadWriteLock {
    /// Both sides, made once: handles handed out are clones, so they share the holder and the
    /// remembered actor.
    read: Lock,
    write: Lock,
}

impl ReadWriteLock {
    pub(crate) fn new(lock: Lock) -> Self {
        let (read, write) = (lock.as_kind(LockKind::Read), lock.as_kind(LockKind::Write));
        Self { read, write }
    }

    /// The read side: all the verbs of [`Lock`].
    pub fn read(&self) -> ReadLock {
        ReadLock(self.read.clone())
    }

    /// The write side: all the verbs of [`Lock`].
    pub fn write(&self) -> WriteLock {
        WriteLock(self.write.clone())
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.read.name()
    }

    /// The holder both sides share.
    pub fn holder_id(&self) -> String {
        self.read.holder_id()
    }
}

/// The read side of a [`ReadWriteLock`]: all the verbs of [`Lock`] through `Deref`.
/// `is_held` and `hold_count` speak of this holder's read holds.
#[derive(Clone, Debug)]
pub struct ReadLock(Lock);

/// The write side of a [`ReadWriteLock`]: all the verbs of [`Lock`] through `Deref`.
/// `is_held` and `hold_count` speak of this holder's write holds (field `<holder>:write`).
#[derive(Clone, Debug)]
pub struct WriteLock(Lock);

impl Deref for ReadLock {
    type Target = Lock;

    fn deref(&self) -> &Lock {
        &self.0
    }
}

impl Deref for WriteLock {
    type Target = Lock;

    fn deref(&self) -> &Lock {
        &self.0
    }
}

impl From<ReadLock> for Lock {
    fn from(lock: ReadLock) -> Lock {
        lock.0
    }
}

impl From<WriteLock> for Lock {
    fn from(lock: WriteLock) -> Lock {
        lock.0
    }
}
