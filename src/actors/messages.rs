//! The messages the actors say to each other, in one place, naming no actor type: where a
//! message carries a return address it is a `WeakRecipient`, but for the route a `Subscribe`
//! hands the PubSubActor ([`Listener`]), held until the matching `Unsubscribe`. The requests a
//! caller sends and the grants they answer with live beside the actor that answers them
//! ([`Acquire`] and [`Release`] in `lock_actor`, [`AcquirePermits`] and [`ReleasePermits`] in
//! `sync_actor`), and the registry's `Resolve` and `ResolveSync` in `registry`.
//!
//! [`Acquire`]: super::lock_actor::Acquire
//! [`Release`]: super::lock_actor::Release
//! [`AcquirePermits`]: super::sync_actor::AcquirePermits
//! [`ReleasePermits`]: super::sync_actor::ReleasePermits

use actix::dev::ToEnvelope;
use actix::{Actor, Addr, Handler, Message, Recipient, WeakRecipient};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub(crate) use super::name::Renewal;
pub use super::name::Wait;
pub use super::sync_state::Adjustment;
use crate::error::LockError;
use crate::protocol::{LockKind, SyncKind};

/// A guard was dropped: release its hold in the background.
#[derive(Message)]
#[rtype(result = "()")]
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
    /// The message as a decimal number, when it is one: a lock's `0` (one waiter may go) or a
    /// write release's `1` (every waiter may), a semaphore's permits, a latch's `0` or `1`.
    pub count: Option<i64>,
    /// The channel it came on (a fair lock has one per waiter), shared with the routes.
    pub channel: Arc<str>,
}

/// The waits-for graph found a cycle of waits through waiter `waiter` of this actor: is it
/// still waiting, with its caller there? A cycle is acted on only once every wait in it says
/// so: a caller that dropped its request (a timeout around it, a `select!`) has moved on,
/// though its watch may not have reported it yet.
#[derive(Message)]
#[rtype(result = "bool")]
pub(crate) struct StillWaiting {
    pub waiter: super::name::WaiterId,
}

/// Which holds of this lock actor belong to one of `owners` (and are still claimed): asked of
/// every lock actor by a manager with a wait past the publishing threshold, for the holds it
/// publishes (deadlock detection across processes). Replies each hold's owner, lock key and
/// holder field.
#[derive(Message)]
#[rtype(result = "Vec<(crate::error::Owner, Arc<str>, Arc<str>)>")]
pub(crate) struct HoldsOf {
    pub owners: Arc<[crate::error::Owner]>,
}

/// The waits-for graph chose waiter `waiter` of this actor to break a cycle of waits: the
/// waiter fails with [`LockError::Deadlock`] and leaves its queue.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Deadlocked {
    pub waiter: super::name::WaiterId,
    pub cycle: crate::error::Cycle,
}

/// The pub/sub connection came back (messages may have been lost): waiters should retry. Or,
/// with `lost`, it was just lost (`why`): no message can come until it is back, and Redis may
/// be away; waiters retry too, so that they learn whether it is.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Resubscribed {
    pub lost: Option<&'static str>,
}

/// The watchdog found a hold gone, or could not renew it within the watchdog timeout.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct HoldLost {
    pub holder: Arc<str>,
    pub kind: Renewal,
    pub epoch: u64,
}

/// Stop a per-name actor: fail its waiters with `Shutdown`; release its holds (a lock's, or
/// permits) when `release`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Stop {
    pub release: bool,
}

/// Which per-name actor: a lock family's (its first kind), or a synchronizer kind's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NameKind {
    Lock(LockKind),
    Sync(SyncKind),
}

/// Registry: the per-name actor `id` of `name` has stopped.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Forget {
    pub kind: NameKind,
    pub name: Arc<str>,
    pub id: u64,
}

/// Registry: how many per-name actors (lock and synchronizer) are alive.
#[derive(Message)]
#[rtype(result = "usize")]
pub(crate) struct CountLive;

/// Registry: stop everything; release what is held when `release`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Shutdown {
    pub release: bool,
}

/// PubSubActor: route `channel` to actor `id` too (beside the other actors listening on it) and
/// subscribe it. Replies once subscribed (or once it will be, at the next connection).
#[derive(Message)]
#[rtype(result = "Result<(), LockError>")]
pub(crate) struct Subscribe {
    pub channel: String,
    pub id: u64,
    pub actor: Listener,
}

/// PubSubActor: actor `id` no longer listens on `channel` (unsubscribed once nobody does).
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
    pub kind: Renewal,
    pub epoch: u64,
    /// When Redis last set the hold's PTTL to the full timeout (its grant).
    pub confirmed: std::time::Instant,
    /// Where each renewal is published for the hold's guards (`valid_until`).
    pub validity: Option<super::lost::Validity>,
    pub actor: WeakRecipient<HoldLost>,
}

/// Watchdog: stop renewing that hold.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Untrack {
    pub name: Arc<str>,
    pub holder: Arc<str>,
    pub kind: Renewal,
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

/// Where the PubSubActor delivers one channel's messages: a lock actor or a synchronizer actor.
///
/// The route to its `Unlocked` handler is a strong recipient, held from the `Subscribe` to the
/// `Unsubscribe`: every message heard goes straight into the actor's mailbox, on the wake's
/// path, where upgrading a weak one made and dropped a sender per message (three allocations
/// and their frees). It does not outlive the actor's wish to stop: an actor unsubscribes every
/// channel before it departs idle (the lock's kept channel at `retire`, a synchronizer's once
/// nobody waits), and an actor stopped outright closes its mailbox, which `alive` reads.
///
/// An actor may also say whether it has anyone a message could wake ([`Hearing`]): while it has
/// not, its messages are not sent to it at all (a lock's actor that keeps its channel with no
/// waiter hears every release of the name, its own among them).
#[derive(Clone)]
pub(crate) struct Listener {
    pub unlocked: Recipient<Unlocked>,
    pub resubscribed: WeakRecipient<Resubscribed>,
    /// `None`: every message is delivered.
    pub hearing: Option<Hearing>,
}

impl Listener {
    /// The listener that is actor `addr`, hearing what `hearing` lets through (`None`: every
    /// message).
    pub(crate) fn of<A>(addr: &Addr<A>, hearing: Option<Hearing>) -> Self
    where
        A: Actor + Handler<Unlocked> + Handler<Resubscribed>,
        A::Context: ToEnvelope<A, Unlocked> + ToEnvelope<A, Resubscribed>,
    {
        Self {
            unlocked: addr.clone().recipient::<Unlocked>(),
            resubscribed: addr.clone().recipient::<Resubscribed>().downgrade(),
            hearing,
        }
    }

    /// Whether the actor still runs (its mailbox is open).
    pub(crate) fn alive(&self) -> bool {
        self.unlocked.connected()
    }

    /// Whether a message is to be delivered now: the actor has someone it could wake.
    pub(crate) fn hears(&self) -> bool {
        self.hearing.as_ref().is_none_or(Hearing::on)
    }
}

/// Whether a per-name actor has anyone an unlock message could wake: set by the actor, read by
/// the PubSubActor for each message on its channels, which is dropped while it is off.
///
/// Dropping one loses nothing. The actor turns it on as a waiter arrives, before that waiter's
/// first attempt is sent; so a message read while it is off was published before any attempt
/// of a waiter there now ran in Redis, and that attempt finds what the message would have
/// told. Sequentially consistent: the two actors may run on two threads, and what orders the
/// actor's store before the PubSubActor's load is the attempt's way through Redis between them.
#[derive(Clone, Default)]
pub(crate) struct Hearing(Arc<AtomicBool>);

impl Hearing {
    /// Whether messages are delivered.
    pub(crate) fn on(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Delivers messages from now on (`true`), or drops them (`false`).
    pub(crate) fn set(&self, on: bool) {
        // Stored only on a change: no write for each request of a name that keeps waiters.
        if self.on() != on {
            self.0.store(on, Ordering::SeqCst);
        }
    }
}

// The synchronizers' messages: public ones first, as for the locks.

/// Wait until a count-down latch is open: `true` when it opened (or was), `false` when the wait
/// ran out first.
#[derive(Clone, Copy, Debug, Message)]
#[rtype(result = "Result<bool, LockError>")]
pub struct AwaitLatch {
    /// How long to wait.
    pub wait: Wait,
}

/// One change or count of a synchronizer that waits for nothing; the reply's meaning is the
/// [`Adjustment`]'s.
#[derive(Clone, Copy, Debug, Message)]
#[rtype(result = "Result<i64, LockError>")]
pub struct Adjust(pub Adjustment);

/// Permit semaphore: give back these permits (16-byte ids, concatenated) all at once, or none
/// when one is not held. Replies how many were given back (0: none).
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<i64, LockError>")]
pub struct ReleaseIds(pub Arc<[u8]>);

/// Permits were dropped: give them back in the background.
#[derive(Message)]
#[rtype(result = "Result<(), LockError>")]
pub(crate) struct GiveBack {
    pub epoch: u64,
}
