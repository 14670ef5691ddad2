//! [`Grant`]: what a lock actor replies to a granted [`Acquire`](crate::Acquire): one hold, with
//! the address that releases it and the signal that tells when it is lost. The handles wrap it
//! into a [`LockGuard`](crate::LockGuard); actix users may keep it as it is. A hold a handle took
//! itself (the uncontended path, `direct`) is a grant too, without an actor.

use std::sync::Arc;

use actix::Addr;
use tokio::sync::watch;

use super::LockActor;
use super::direct::DirectHold;
use super::lock_state::HoldKey;
use super::messages::ReleaseHold;
use crate::error::LockError;
use crate::scripts::LockKind;

/// One hold of a lock, as granted by its [`LockActor`]. Dropping it releases the hold in the
/// background; send it back in a [`Release`](crate::Release) to learn the outcome.
#[must_use = "dropping a grant releases the lock at once"]
pub struct Grant {
    origin: Origin,
    name: Arc<str>,
    holder: Arc<str>,
    kind: LockKind,
    epoch: u64,
    /// A fenced lock's token for this acquisition.
    token: Option<u64>,
    lost: watch::Receiver<bool>,
    /// Whether dropping it still has to release its hold.
    armed: bool,
}

/// Who granted a hold.
enum Origin {
    /// A lock actor, and its id: a `Release` is refused by any other actor.
    Actor(Addr<LockActor>, u64),
    /// Nobody: the handle took it itself.
    Direct(Arc<DirectHold>),
}

impl Grant {
    pub(crate) fn new(
        (actor, actor_id): (Addr<LockActor>, u64),
        name: Arc<str>,
        (holder, kind): HoldKey,
        epoch: u64,
        lost: watch::Receiver<bool>,
        token: Option<u64>,
    ) -> Self {
        Self {
            origin: Origin::Actor(actor, actor_id),
            name,
            holder,
            kind,
            epoch,
            token,
            lost,
            armed: true,
        }
    }

    /// A hold the handle took itself.
    pub(crate) fn direct(hold: Arc<DirectHold>, lost: watch::Receiver<bool>) -> Self {
        Self {
            name: hold.name().clone(),
            holder: hold.holder().clone(),
            kind: LockKind::Reentrant,
            epoch: 0,
            token: None,
            lost,
            armed: true,
            origin: Origin::Direct(hold),
        }
    }

    /// Whether the actor of id `actor_id` granted it.
    pub(crate) fn granted_by(&self, actor_id: u64) -> bool {
        matches!(self.origin, Origin::Actor(_, id) if id == actor_id)
    }

    /// Releases a hold the handle took itself (`None` for an actor's grant: send it a
    /// [`Release`](crate::Release)).
    pub(crate) fn release_direct(
        mut self,
    ) -> Result<impl Future<Output = Result<(), LockError>> + Send + 'static, Self> {
        match &self.origin {
            Origin::Direct(hold) => {
                let hold = hold.clone();
                self.armed = false;
                Ok(hold.release())
            }
            Origin::Actor(..) => Err(self),
        }
    }

    /// Takes the hold out of the grant: the caller releases it.
    pub(crate) fn disarm(&mut self) -> (HoldKey, u64) {
        self.armed = false;
        ((self.holder.clone(), self.kind), self.epoch)
    }

    /// The lock actor that granted it: `None` for a hold taken without one (a reentrant lock's
    /// uncontended acquire through a [`Lock`](crate::Lock) handle), which its guard, or its
    /// drop, releases.
    pub fn actor(&self) -> Option<&Addr<LockActor>> {
        match &self.origin {
            Origin::Actor(actor, _) => Some(actor),
            Origin::Direct(_) => None,
        }
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.name
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

    /// Whether the lock is known to be lost (or its actor stopped renewing it).
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow() || self.lost.has_changed().is_err()
    }

    /// Resolves once the lock is known to be lost; never, while it is held.
    pub async fn lost(&self) {
        let mut lost = self.lost.clone();
        let _ = lost.wait_for(|lost| *lost).await;
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if self.armed {
            let ((holder, kind), epoch) = self.disarm();
            match &self.origin {
                Origin::Actor(actor, _) => actor.do_send(ReleaseHold {
                    holder,
                    kind,
                    epoch,
                }),
                Origin::Direct(hold) => hold.clone().release_later(),
            }
        }
    }
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("name", &self.name)
            .field("holder", &self.holder)
            .field("kind", &self.kind)
            .field("lost", &self.is_lost())
            .finish()
    }
}
