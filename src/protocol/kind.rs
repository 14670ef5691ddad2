//! The kinds of lock, and what tells them apart on the wire: script, hash field, channel.

use std::time::Duration;

use redis::Script;

use super::{
    ACQUIRE, Expect, FAIR_ACQUIRE, FAIR_NON_REENTRANT_ACQUIRE, FAIR_RELEASE, FENCED_ACQUIRE,
    FairArgs, NON_REENTRANT_ACQUIRE, READ_ACQUIRE, READ_RELEASE, RELEASE, SPIN_RELEASE,
    WRITE_ACQUIRE, WRITE_RELEASE, millis,
};
use crate::connections::command::ScriptCall;
use crate::protocol::keys::{self, UNLOCK_MESSAGE, WAKE_ALL_MESSAGE};

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
    /// The spin lock (Redisson's `RedissonSpinLock`, `getSpinLock`): the reentrant lock's hash
    /// and acquire, but its waiters subscribe to nothing and retry on a back-off
    /// ([`SpinBackOff`](crate::SpinBackOff)), and its release publishes nothing.
    Spin,
    /// The group multi-lock (Redisson's `RedissonFasterMultiLock`, `getMultiLock(group,
    /// values)`): many members, each a field of the group's hash holding its owner, taken and
    /// released together in one script ([`LockManager::group_lock`](crate::LockManager::group_lock)).
    Group,
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
            | LockKind::NonReentrantFair
            | LockKind::Spin => keys::unlock_channel(name),
            LockKind::Group => keys::unlock_channel(name),
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

    /// Whether one holder at a time holds it and its waiters queue nowhere but in their own
    /// process: not a fair kind (those queue in Redis) and not a read-write side (readers
    /// share). Only these are served in local order and handed from a release to a waiter.
    pub(crate) fn is_exclusive_unfair(self) -> bool {
        matches!(
            self,
            LockKind::Reentrant | LockKind::Fenced | LockKind::NonReentrant | LockKind::Spin
        )
    }

    /// Whether its waiters retry on a back-off instead of listening on a channel (the spin
    /// lock): nothing publishes its releases.
    pub(crate) fn spins(self) -> bool {
        self == LockKind::Spin
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
            LockKind::Spin => "spin",
            LockKind::Group => "group",
        }
    }

    /// The kind whose [`label`](Self::label) is `label`.
    pub(crate) fn from_label(label: &str) -> Option<Self> {
        [
            LockKind::Reentrant,
            LockKind::Fenced,
            LockKind::Read,
            LockKind::Write,
            LockKind::Fair,
            LockKind::NonReentrant,
            LockKind::NonReentrantFair,
            LockKind::Spin,
            LockKind::Group,
        ]
        .into_iter()
        .find(|kind| kind.label() == label)
    }

    /// Kinds served by one lock actor: both sides of a read-write lock. (Other kinds share a
    /// channel without sharing an actor: the pub/sub actor routes a channel to each listener.)
    pub(crate) fn family(self) -> LockKind {
        match self {
            LockKind::Write => LockKind::Read,
            other => other,
        }
    }
}

/// What each kind's scripts are and take (protocol.md: one acquire script per kind; the
/// releases are shared more).
impl LockKind {
    /// Its acquire script.
    fn acquire_script(self) -> &'static Script {
        match self {
            LockKind::Reentrant => &ACQUIRE,
            LockKind::Fenced => &FENCED_ACQUIRE,
            LockKind::Read => &READ_ACQUIRE,
            LockKind::Write => &WRITE_ACQUIRE,
            LockKind::Fair => &FAIR_ACQUIRE,
            LockKind::NonReentrant => &NON_REENTRANT_ACQUIRE,
            LockKind::NonReentrantFair => &FAIR_NON_REENTRANT_ACQUIRE,
            // Redisson's spin lock acquires as its reentrant lock does.
            LockKind::Spin => &ACQUIRE,
            LockKind::Group => &super::group::GROUP_ACQUIRE,
        }
    }

    /// An acquire attempt of `holder` on the lock `name`, for `lease`: its script with the
    /// keys and arguments of this kind, in one presized command. `expect`: the holder's count
    /// before it; `publish`: `publish` or `spublish` (a fair prune wakes the next head);
    /// `delay`: the lock-delay in ms, 0 for none (reentrant locks only).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn acquire_call(
        self,
        name: &str,
        holder: &str,
        lease: Duration,
        fair: FairArgs,
        expect: Expect,
        publish: &'static str,
        delay: u64,
    ) -> ScriptCall<'static> {
        let delayed = delay > 0 && self == LockKind::Reentrant;
        let mut call = self.acquire_head(name, holder, lease, fair, delayed);
        call.arg(expect.count);
        if self.is_fair() {
            // fair_acquire.lua, ARGV[6..8]: the place timeout, and what wakes the new head of a
            // free lock should the prune drop the one before.
            call.arg(millis(fair.cap)).arg(UNLOCK_MESSAGE).arg(publish);
        }
        if delayed {
            call.arg(delay);
        }
        call
    }

    /// The keys and the leading arguments of an acquire attempt of this kind (up to the
    /// holder's expected count): what differs from kind to kind. `delayed`: with the reentrant
    /// lock's delay key.
    fn acquire_head(
        self,
        name: &str,
        holder: &str,
        lease: Duration,
        fair: FairArgs,
        delayed: bool,
    ) -> ScriptCall<'static> {
        let (key, lease, script) = (keys::lock_key(name), millis(lease), self.acquire_script());
        // Room for the keys and arguments of the longest (fair) attempt.
        let room = 3 * name.len() + holder.len() + 96;
        match self {
            LockKind::Reentrant if delayed => {
                let mut call = ScriptCall::new(script, 2, 4, room + name.len() + 16);
                call.key(key)
                    .key(keys::delay_key(name))
                    .arg(lease)
                    .arg(holder);
                call
            }
            LockKind::Reentrant | LockKind::NonReentrant | LockKind::Spin => {
                let mut call = ScriptCall::new(script, 1, 3, room);
                call.key(key).arg(lease).arg(holder);
                call
            }
            LockKind::Fenced => {
                let mut call = ScriptCall::new(script, 2, 3, room);
                call.key(key)
                    .key(keys::token_key(name))
                    .arg(lease)
                    .arg(holder);
                call
            }
            LockKind::Read => {
                let mut call = ScriptCall::new(script, 2, 4, room + holder.len());
                call.key(key)
                    .key(keys::read_timeout_prefix(name, holder))
                    .arg(lease)
                    .arg(holder)
                    .arg(keys::write_field(holder));
                call
            }
            LockKind::Write => {
                let mut call = ScriptCall::new(script, 1, 3, room);
                call.key(key).arg(lease).arg(keys::write_field(holder));
                call
            }
            // `group_acquire.lua`: the caller appends the members after the expected count.
            LockKind::Group => {
                let mut call = ScriptCall::new(script, 1, 3, room);
                call.key(key).arg(lease).arg(holder);
                call
            }
            LockKind::Fair | LockKind::NonReentrantFair => {
                // No `now`: lockman's fair scripts read the server's clock (`fair_prune.lua`),
                // so that every lockman client judges the places by the same one.
                let mut call = ScriptCall::new(script, 4, 8, room + name.len());
                call.key(key)
                    .key(keys::fair_queue(name))
                    .key(keys::fair_deadlines(name))
                    .key(keys::unlock_channel(name))
                    .arg(lease)
                    .arg(holder)
                    .arg(millis(fair.wait))
                    .arg(if fair.once { "1" } else { "0" });
                call
            }
        }
    }

    /// A release of one hold of `holder` on the lock `name`, restoring `lease` when holds
    /// remain: its script with the keys and arguments of this kind. `expect`: the holder's
    /// count before it; `delay`: the lock-delay in ms, 0 for none (reentrant locks only: a
    /// release deletes the delay key).
    pub(super) fn release_call(
        self,
        name: &str,
        holder: &str,
        lease: Duration,
        expect: Expect,
        publish: &'static str,
        delay: u64,
    ) -> ScriptCall<'static> {
        let mut call = self.release_head(name, holder, lease, publish, delay > 0);
        call.arg(expect.count);
        call
    }

    /// The keys and the leading arguments of a release of this kind (up to the holder's
    /// expected count): what differs from kind to kind. `delayed`: a reentrant release deletes
    /// the delay key too.
    fn release_head(
        self,
        name: &str,
        holder: &str,
        lease: Duration,
        publish: &'static str,
        delayed: bool,
    ) -> ScriptCall<'static> {
        let key = keys::lock_key(name);
        let room = 3 * name.len() + holder.len() + 96;
        match self {
            LockKind::Reentrant if delayed => {
                let mut call = ScriptCall::new(&RELEASE, 3, 5, room + name.len() + 16);
                call.key(key)
                    .key(keys::unlock_channel_arg(name))
                    .key(keys::delay_key(name));
                release_tail(call, lease, holder, publish)
            }
            // `group_release.lua` takes the reentrant release's keys and arguments; the caller
            // appends the members after the expected count.
            LockKind::Reentrant | LockKind::Fenced | LockKind::NonReentrant | LockKind::Group => {
                let script = match self {
                    LockKind::Group => &super::group::GROUP_RELEASE,
                    _ => &RELEASE,
                };
                let mut call = ScriptCall::new(script, 2, 5, room);
                call.key(key).key(keys::unlock_channel_arg(name));
                release_tail(call, lease, holder, publish)
            }
            LockKind::Spin => {
                // release_prologue.lua's keys and arguments; nothing is published.
                let mut call = ScriptCall::new(&SPIN_RELEASE, 1, 5, room);
                call.key(key);
                release_tail(call, lease, holder, publish)
            }
            // A read-write lock's side releases on the read-write channel.
            LockKind::Read | LockKind::Write => self.side_release(name, holder, lease, publish),
            LockKind::Fair | LockKind::NonReentrantFair => {
                let mut call = ScriptCall::new(&FAIR_RELEASE, 4, 5, room);
                call.key(key)
                    .key(keys::fair_queue(name))
                    .key(keys::fair_deadlines(name))
                    .key(keys::unlock_channel(name));
                release_tail(call, lease, holder, publish)
            }
        }
    }

    /// A release of a read-write lock's side (`read_release.lua`, `write_release.lua`): what
    /// [`release_head`](Self::release_head) gives for `Read` and `Write`.
    fn side_release(
        self,
        name: &str,
        holder: &str,
        lease: Duration,
        publish: &'static str,
    ) -> ScriptCall<'static> {
        let key = keys::lock_key(name);
        let room = 3 * name.len() + holder.len() + 96;
        match self {
            LockKind::Read => {
                let mut call = ScriptCall::new(&READ_RELEASE, 4, 4, room + holder.len());
                call.key(key)
                    .key(keys::rwlock_channel(name))
                    .key(keys::read_timeout_prefix(name, holder))
                    .key(keys::tagged(name))
                    .arg(UNLOCK_MESSAGE)
                    .arg(holder)
                    .arg(publish);
                call
            }
            _ => {
                let mut call = ScriptCall::new(&WRITE_RELEASE, 2, 5, room);
                call.key(key)
                    .key(keys::rwlock_channel(name))
                    .arg(WAKE_ALL_MESSAGE)
                    .arg(millis(lease))
                    .arg(keys::write_field(holder))
                    .arg(publish);
                call
            }
        }
    }
}

/// The arguments every release but a read-write side's ends its head with: the unlock message,
/// the lease, the holder, and whether to publish (`release_prologue.lua`'s order).
fn release_tail(
    mut call: ScriptCall<'static>,
    lease: Duration,
    holder: &str,
    publish: &'static str,
) -> ScriptCall<'static> {
    call.arg(UNLOCK_MESSAGE)
        .arg(millis(lease))
        .arg(holder)
        .arg(publish);
    call
}
