//! [`Permits`]: what a synchronizer actor replies to a granted
//! [`AcquirePermits`](crate::actix::AcquirePermits): permits of a semaphore, with the address that gives
//! them back and the signal that tells when they are lost. The handles wrap it into a guard;
//! actix users may keep it as it is.

use std::time::Duration;

use actix::{Addr, Message};

use super::SyncActor;
use crate::actors::lost::LostSignal;
use crate::actors::messages::GiveBack;
use crate::actors::name::Wait;
use crate::actors::shell::receipt::Receipt;
use crate::error::LockError;
use crate::protocol::{SyncKind, hex};

/// Permits of a semaphore, as granted by its [`SyncActor`]. Dropping them gives them back in the
/// background; send them back in a [`ReleasePermits`](crate::actix::ReleasePermits) to learn the
/// outcome.
#[must_use = "dropping permits gives them back at once"]
pub struct Permits {
    pub(super) hold: Receipt<SyncActor>,
    pub(super) kind: SyncKind,
    pub(super) permits: u32,
    /// A permit semaphore's ids, 16 bytes each.
    pub(super) ids: Vec<u8>,
}

impl Permits {
    /// The actor that granted them: send it a [`ReleasePermits`](crate::actix::ReleasePermits).
    pub fn actor(&self) -> &Addr<SyncActor> {
        &self.hold.actor
    }

    /// The semaphore's key: its name with the [name prefix](crate::Config::name_prefix).
    pub fn name(&self) -> &str {
        &self.hold.name
    }

    /// Which kind of semaphore.
    pub fn kind(&self) -> SyncKind {
        self.kind
    }

    /// How many permits.
    pub fn count(&self) -> u32 {
        self.permits
    }

    /// A permit semaphore's permit ids, as Java shows them (32 lowercase hex characters); none
    /// for a plain semaphore.
    pub fn ids(&self) -> Vec<String> {
        self.ids.chunks(16).map(hex).collect()
    }

    /// Whether the request waited for these permits: too few were free at first (or other
    /// local waiters were ahead), and they came later (a release's message, a hand-off, an
    /// expiry).
    pub fn waited(&self) -> bool {
        self.hold.waited
    }

    /// Whether the permits are known to be lost: their lease ran out, or renewal found them gone
    /// (another client reclaimed them after they expired), or their actor stopped.
    pub fn is_lost(&self) -> bool {
        self.hold.lost.is_lost()
    }

    /// The latest instant (monotonic clock) at which the permits are still guaranteed (as
    /// [`Grant::valid_until`](crate::actix::Grant::valid_until)); `None` for a plain semaphore's
    /// permits, which never expire.
    pub fn valid_until(&self) -> Option<std::time::Instant> {
        self.hold.lost.confirmed().map(|c| c.valid_until())
    }

    /// The lost signal and validity, for `scope`.
    pub(crate) fn signal(&self) -> &LostSignal {
        &self.hold.lost
    }

    /// Resolves once the permits are known to be lost; never, while they are held.
    pub async fn lost(&self) {
        self.hold.lost.wait().await;
    }

    /// Keeps the permits taken: dropping them no longer gives them back (a plain semaphore's
    /// permits are then given back with `release(n)`, by anyone, as in Redisson).
    pub fn forget(mut self) {
        self.hold.armed = false;
    }
}

impl Drop for Permits {
    fn drop(&mut self) {
        if self.hold.armed {
            self.hold.armed = false;
            let epoch = self.hold.epoch;
            self.hold.actor.do_send(GiveBack { epoch });
        }
    }
}

impl std::fmt::Debug for Permits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permits")
            .field("name", &self.hold.name)
            .field("kind", &self.kind)
            .field("count", &self.permits)
            .field("lost", &self.is_lost())
            .finish()
    }
}

/// Take `permits` permits of a semaphore or a permit semaphore, served by its
/// [`SyncActor`](super::SyncActor): the reply is the [`Permits`] taken, or `None` when the wait
/// ran out. Dropping the reply (or the request) never leaks permits: permits that reach nobody
/// are given back.
///
/// A permit semaphore's permits taken with `lease: None` are renewed by the watchdog while held
/// and come back within the watchdog timeout when their process dies; with a lease they expire
/// after it. A plain semaphore's permits have no lease (Redisson's semaphore keeps none).
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<Option<Permits>, LockError>")]
pub struct AcquirePermits {
    /// How many permits, at least 1.
    pub permits: u32,
    /// A permit semaphore's lease; `None` for the watchdog. Ignored by a plain semaphore.
    pub lease: Option<Duration>,
    /// How long to wait while too few are free.
    pub wait: Wait,
}

/// Give back the permits of one grant. Replies [`LockError::NotHeld`] when a permit
/// semaphore's permits were lost meanwhile (expired, or reclaimed by another client).
#[derive(Debug, Message)]
#[rtype(result = "Result<(), LockError>")]
pub struct ReleasePermits(pub Permits);
