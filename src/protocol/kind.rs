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
    /// The non-reentrant lock (Redisson 4.4's `RedissonNonReentrantLock`): the reentrant lock's
    /// keys and channel, but a second acquire by the holder that holds it is refused.
    NonReentrant,
    /// The non-reentrant fair lock (Redisson 4.4's `RedissonNonReentrantFairLock`): the fair
    /// lock's keys and channels, refusing a second acquire by the holder that holds it.
    NonReentrantFair,
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
            LockKind::Reentrant
            | LockKind::Fenced
            | LockKind::Fair
            | LockKind::NonReentrant
            | LockKind::NonReentrantFair => keys::unlock_channel(name),
        }
    }

    /// The channel on which `holder`'s waiter is woken: the lock's, or for a fair lock the
    /// waiter's own.
    pub(crate) fn waiter_channel(self, name: &str, holder: &str) -> String {
        match self {
            LockKind::Fair | LockKind::NonReentrantFair => keys::fair_channel(name, holder),
            _ => self.channel(name),
        }
    }

    /// Whether waiters queue in Redis (the fair lock's queue and deadlines, a channel each).
    pub(crate) fn is_fair(self) -> bool {
        matches!(self, LockKind::Fair | LockKind::NonReentrantFair)
    }

    /// Whether a second acquire by the holder that holds it is refused
    /// ([`LockError::AlreadyHeld`](crate::LockError::AlreadyHeld)) rather than re-entering.
    pub fn is_non_reentrant(self) -> bool {
        matches!(self, LockKind::NonReentrant | LockKind::NonReentrantFair)
    }

    /// A label for logs, metrics (the `kind` label) and client records.
    pub(crate) fn label(self) -> &'static str {
        match self {
            LockKind::Reentrant => "lock",
            LockKind::Fenced => "fenced",
            LockKind::Read => "read",
            LockKind::Write => "write",
            LockKind::Fair => "fair",
            LockKind::NonReentrant => "non_reentrant",
            LockKind::NonReentrantFair => "non_reentrant_fair",
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
