//! [`Grant`]: what a lock actor replies to a granted [`Acquire`](crate::actix::Acquire): one hold, with
//! the address that releases it and the signal that tells when it is lost. The handles wrap it
//! into a [`LockGuard`](crate::LockGuard); actix users may keep it as it is.

use std::sync::Arc;

use actix::Addr;

use super::LockActor;
use crate::actors::lock_state::HoldKey;
use crate::actors::lost::LostSignal;
use crate::actors::messages::ReleaseHold;
use crate::actors::shell::receipt::Receipt;
use crate::protocol::LockKind;

/// One hold of a lock, as granted by its [`LockActor`]. Dropping it releases the hold in the
/// background; send it back in a [`Release`](crate::actix::Release) to learn the outcome.
#[must_use = "dropping a grant releases the lock at once"]
pub struct Grant {
    pub(super) hold: Receipt<LockActor>,
    pub(super) holder: Arc<str>,
    pub(super) kind: LockKind,
    /// A fenced lock's token for this acquisition.
    pub(super) token: Option<u64>,
}

impl Grant {
    /// The hold's epoch: the same for every grant of one hold (its re-entries), never reused.
    pub(crate) fn epoch(&self) -> u64 {
        self.hold.epoch
    }

    /// Takes the hold out of the grant: the caller releases it.
    pub(crate) fn disarm(&mut self) -> (HoldKey, u64) {
        // Its claim on the hold, for the waits-for graph, is its lost signal's: let go with
        // the hold.
        if self.hold.armed {
            self.hold.lost.let_go();
        }
        self.hold.armed = false;
        ((self.holder.clone(), self.kind), self.hold.epoch)
    }

    /// The lock actor that granted it: send it a [`Release`](crate::actix::Release) of this grant.
    pub fn actor(&self) -> &Addr<LockActor> {
        &self.hold.actor
    }

    /// The granting actor's address, shared (for sending this grant back to it).
    pub(crate) fn actor_link(&self) -> Arc<Addr<LockActor>> {
        self.hold.actor.clone()
    }

    /// The granting actor's shared address, borrowed (a handle remembers it weakly).
    pub(crate) fn actor_shared(&self) -> &Arc<Addr<LockActor>> {
        &self.hold.actor
    }

    /// The lock's key: its name with the [name prefix](crate::Config::name_prefix) (the name
    /// of the actor that granted it). A [`LockGuard`](crate::LockGuard)'s `name()` gives the
    /// name as given.
    pub fn name(&self) -> &str {
        &self.hold.name
    }

    /// The holder that holds it.
    pub fn holder_id(&self) -> &str {
        &self.holder
    }

    /// Which kind of lock it holds.
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// A fenced lock's token for this acquisition (`None` for other kinds).
    pub fn token(&self) -> Option<u64> {
        self.token
    }

    /// Whether the request waited for this grant: its first attempt found the lock taken, and
    /// it was granted later (woken by a release's message, a hand-off or the holder's TTL).
    pub fn waited(&self) -> bool {
        self.hold.waited
    }

    /// Whether the lock is known to be lost (or its actor stopped renewing it).
    pub fn is_lost(&self) -> bool {
        self.hold.lost.is_lost()
    }

    /// The latest instant (monotonic clock) at which the hold is still guaranteed: when the
    /// acquire or renewal Redis last confirmed was *sent*, plus the TTL it set, minus a drift
    /// allowance of 1 % of that TTL + 2 ms (RedLock's validity rule). Renewals move it later;
    /// nothing else does.
    pub fn valid_until(&self) -> std::time::Instant {
        // A grant is confirmed before it is made (its actor publishes the grant first); the
        // fallback (now) is never reached, and would only make the hold look expiring.
        (self.hold.lost)
            .confirmed()
            .map_or_else(std::time::Instant::now, |c| c.valid_until())
    }

    /// The lost signal and validity, for `scope`.
    pub(crate) fn signal(&self) -> &LostSignal {
        &self.hold.lost
    }

    /// Resolves once the lock is known to be lost; never, while it is held.
    pub async fn lost(&self) {
        self.hold.lost.wait().await;
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if self.hold.armed {
            let ((holder, kind), epoch) = self.disarm();
            self.hold.actor.do_send(ReleaseHold {
                holder,
                kind,
                epoch,
            });
        }
    }
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("name", &self.hold.name)
            .field("holder", &self.holder)
            .field("kind", &self.kind)
            .field("lost", &self.is_lost())
            .finish()
    }
}
