//! Every message the actors exchange, in one place. [`Acquire`] and [`Release`] are public: the
//! handles send exactly these, and an actix user may send them to a
//! [`LockActor`](super::LockActor) directly (see `examples/messages.rs`).

use actix::{Addr, Message, WeakAddr};
use std::sync::Arc;
use std::time::Duration;

pub use super::lock_state::Wait;
use super::{Grant, LockActor};
use crate::error::LockError;
use crate::scripts::LockKind;

/// Take the lock for `holder`: the reply is a [`Grant`], or `None` when the wait ran out.
///
/// A lock taken with `lease: None` is renewed by the watchdog while held; one taken with a lease
/// expires by itself after it. Dropping the reply (or the request) never leaks a hold: a grant
/// that reaches nobody releases the lock.
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<Option<Grant>, LockError>")]
pub struct Acquire {
    /// The holder, `<client id>:<n>` (see [`Lock::holder_id`](crate::Lock::holder_id)).
    pub holder: String,
    /// The lease; `None` for the watchdog.
    pub lease: Option<Duration>,
    /// How long to wait while the lock is busy.
    pub wait: Wait,
    /// Which lock: [`LockKind::Reentrant`], or another kind served by the same actor family
    /// (both sides of a read-write lock go to one actor).
    pub kind: LockKind,
}

/// Release the hold of one grant. Replies [`LockError::NotHeld`] when the lock was lost meanwhile.
#[derive(Debug, Message)]
#[rtype(result = "Result<(), LockError>")]
pub struct Release(pub Grant);

/// A guard was dropped: release its hold in the background.
#[derive(Message)]
#[rtype(result = "Result<(), LockError>")]
pub(crate) struct ReleaseHold {
    pub holder: Arc<str>,
    pub kind: LockKind,
    pub epoch: u64,
}

/// The PubSubActor saw a release on the lock's channel: wake one waiter, or all (a write
/// release of a read-write lock).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Unlocked {
    pub all: bool,
    /// The channel it came on (a fair lock has one per waiter).
    pub channel: String,
}

/// The pub/sub connection came back (messages may have been lost): waiters should retry.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Resubscribed;

/// The watchdog found a hold gone, or could not renew it within the watchdog timeout.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct HoldLost {
    pub holder: Arc<str>,
    pub kind: LockKind,
    pub epoch: u64,
}

/// Stop the lock actor: fail its waiters with `Shutdown`, release its holds when `release`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct StopLock {
    pub release: bool,
}

/// Registry: the live lock actor of `name`, started when there is none.
#[derive(Message)]
#[rtype(result = "Result<Addr<LockActor>, LockError>")]
pub(crate) struct Resolve {
    pub kind: LockKind,
    pub name: Arc<str>,
}

/// Registry: the lock actor `id` of `name` has stopped.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Forget {
    pub family: LockKind,
    pub name: Arc<str>,
    pub id: u64,
}

/// Registry: how many lock actors are alive.
#[derive(Message)]
#[rtype(result = "usize")]
pub(crate) struct CountLive;

/// Registry: stop everything; release what is held when `release`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Shutdown {
    pub release: bool,
}

/// PubSubActor: route `channel` to lock actor `id` and subscribe it. Replies once subscribed
/// (or once it will be, at the next connection).
#[derive(Message)]
#[rtype(result = "Result<(), LockError>")]
pub(crate) struct Subscribe {
    pub channel: String,
    pub id: u64,
    pub actor: WeakAddr<LockActor>,
}

/// PubSubActor: lock actor `id` no longer waits on `channel`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Unsubscribe {
    pub channel: String,
    pub id: u64,
}

/// Watchdog: renew `holder`'s hold on `name` until [`Untrack`] or loss.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Track {
    pub name: Arc<str>,
    pub holder: Arc<str>,
    pub kind: LockKind,
    pub epoch: u64,
    /// When Redis last set the hold's PTTL to the full timeout (its grant).
    pub confirmed: std::time::Instant,
    pub actor: WeakAddr<LockActor>,
}

/// Watchdog: stop renewing that hold.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Untrack {
    pub name: Arc<str>,
    pub holder: Arc<str>,
    pub kind: LockKind,
    pub epoch: u64,
}

/// PubSubActor: the primary moved (Sentinel failover): connect to the new one and subscribe
/// again there.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Reconnect;

/// Watchdog: renew every tracked hold now (after a failover, to find the holds that did not
/// reach the new primary).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct RenewNow;

/// PubSubActor, Watchdog: drop connections and schedules for good (they are supervised, so
/// they stay as inert actors until their last address goes).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Halt;
