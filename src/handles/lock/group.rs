//! [`GroupLock`]: many members of one hash, taken and released together in one script.

use std::ops::Deref;

use super::Lock;

/// The group multi-lock (Redisson's `RedissonFasterMultiLock`, `getMultiLock(group, values)`),
/// from [`LockManager::group_lock`](crate::LockManager::group_lock): every member of
/// [`members`](Self::members) is a field of the hash `group` holding its owner, beside
/// `<member>:<owner>:expire_time` and `<member>:<owner>:lock_count` fields (docs/protocol.md,
/// "Group multi-lock"). One script takes them all, or none while another owns one of them
/// unexpired; one script releases them all. Two group locks on one group exclude each other when
/// their members overlap, and only then.
///
/// Reentrant as the reentrant lock is: clones share the holder, and each acquire counts once on
/// every member. The watchdog renews a hold taken without a lease; one taken with a lease ends by
/// itself. Every acquire and release is a message to the group's lock actor, as for every kind.
/// [`force_unlock`](Lock::force_unlock) deletes these members' fields only (whoever owns each),
/// [`is_locked`](Lock::is_locked) says whether any of them has an unexpired owner,
/// [`hold_count`](Lock::hold_count) is this holder's count when it holds every member.
///
/// Redisson hashes each value it is given into its field (`Hash.hash128toBase64` of the encoded
/// value); lockman takes the field names as given. To share members with a Java service, give
/// lockman the fields Redisson writes.
///
/// All the verbs of [`Lock`], through `Deref`.
#[derive(Clone, Debug)]
pub struct GroupLock(Lock);

impl GroupLock {
    pub(crate) fn new(lock: Lock) -> Self {
        Self(lock)
    }

    /// The members, as given: the hash fields this lock takes.
    pub fn members(&self) -> &[String] {
        self.0.group.as_ref().map_or(&[], |g| &g.members()[..])
    }
}

impl Deref for GroupLock {
    type Target = Lock;

    fn deref(&self) -> &Lock {
        &self.0
    }
}

impl From<GroupLock> for Lock {
    fn from(lock: GroupLock) -> Lock {
        lock.0
    }
}
