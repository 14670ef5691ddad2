//! The kinds of lock, and what tells them apart on the wire: script, hash field, channel.

use crate::protocol::keys;

/// The kinds of lock: each has its own scripts, hash field and channel (protocol.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// The reentrant lock.
    Reentrant,
    /// The reentrant lock plus a token counter.
    Fenced,
    /// The read side of a read-write lock.
    Read,
    /// The write side of a read-write lock.
    Write,
    /// The fair lock: a FIFO queue of waiters in Redis.
    Fair,
}

impl LockKind {
    /// The hash field that holds `holder`'s count for this kind.
    pub(crate) fn field(self, holder: &str) -> String {
        match self {
            LockKind::Write => keys::write_field(holder),
            _ => holder.to_owned(),
        }
    }

    /// The channel its releases are published on.
    pub(crate) fn channel(self, name: &str) -> String {
        match self {
            LockKind::Read | LockKind::Write => keys::rwlock_channel(name),
            LockKind::Reentrant | LockKind::Fenced | LockKind::Fair => keys::unlock_channel(name),
        }
    }

    /// The channel on which `holder`'s waiter is woken: the lock's, or for a fair lock the
    /// waiter's own.
    pub(crate) fn waiter_channel(self, name: &str, holder: &str) -> String {
        match self {
            LockKind::Fair => keys::fair_channel(name, holder),
            _ => self.channel(name),
        }
    }

    /// Kinds that share a channel share a lock actor: both sides of a read-write lock.
    pub(crate) fn family(self) -> LockKind {
        match self {
            LockKind::Write => LockKind::Read,
            other => other,
        }
    }
}
