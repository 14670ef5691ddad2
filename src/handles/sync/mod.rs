//! The synchronizers' handles, wire-compatible with Redisson's: [`Semaphore`] (RSemaphore),
//! [`PermitSemaphore`] (RPermitExpirableSemaphore) and [`CountDownLatch`] (RCountDownLatch).
//! Like the locks' handles, every acquire, give-back and adjustment is a message to the name's
//! synchronizer actor, which owns its waiters, its subscription and its permits (reads such as
//! `read` go to Redis directly).

mod guard;
mod info;
mod latch;
mod permit;
mod semaphore;

use std::sync::Arc;

use actix::dev::ToEnvelope;
use actix::{Handler, Message};

pub use guard::PermitGuard;
pub use info::{HeldPermit, SyncInfo};
pub use latch::CountDownLatch;
pub use permit::{PermitLease, PermitSemaphore};
pub use semaphore::Semaphore;

use tracing::Instrument;

use crate::actors::messages::{Adjust, Adjustment};
use crate::actors::name::Wait;
use crate::actors::sync_actor::AcquirePermits;
use crate::actors::sync_actor::SyncActor;
use crate::error::LockError;
use crate::handles::name::Name;
use crate::handles::reach::Reach;
use crate::handles::state::Inner;
use crate::protocol::SyncKind;

/// What every synchronizer handle is: a name of a kind, on a manager, with the actor it last
/// reached.
#[derive(Clone)]
struct Handle {
    mgr: Arc<Inner>,
    name: Name,
    kind: SyncKind,
    actor: Reach<SyncActor>,
}

impl Handle {
    fn new(mgr: Arc<Inner>, name: Name, kind: SyncKind) -> Self {
        Self {
            mgr,
            name,
            kind,
            actor: Reach::default(),
        }
    }

    /// Sends `msg` to the name's actor, resolving it again if it stopped meanwhile.
    async fn send<M, T>(&self, msg: M) -> Result<T, LockError>
    where
        M: Message<Result = Result<T, LockError>> + Clone + Send + 'static,
        T: Send + 'static,
        SyncActor: Handler<M>,
        <SyncActor as actix::Actor>::Context: ToEnvelope<SyncActor, M>,
    {
        self.name.validate()?;
        let resolve = || self.mgr.sync_actor(self.kind, self.name.key().clone());
        self.actor
            .send(|| None, resolve, || msg.clone(), |_| None)
            .await?
            .0
    }

    async fn adjust(&self, op: Adjustment) -> Result<i64, LockError> {
        self.send(Adjust(op)).await
    }

    /// Takes permits through the actor and wraps them into a guard.
    async fn acquire(
        &self,
        permits: u32,
        lease: Option<std::time::Duration>,
        wait: Wait,
    ) -> Result<Option<PermitGuard>, LockError> {
        let msg = AcquirePermits {
            permits,
            lease,
            wait,
        };
        let span = crate::handles::trace::acquire(self.name.key(), &self.kind, wait);
        let granted = self.send(msg).instrument(span.clone()).await;
        crate::handles::trace::acquired(
            &span,
            &granted,
            crate::actors::sync_actor::Permits::waited,
        );
        Ok(granted?.map(|p| PermitGuard::new(p, self.mgr.clone())))
    }

    /// Waits for a latch to open (`AwaitLatch`), in a span.
    async fn await_latch(&self, wait: Wait) -> Result<bool, LockError> {
        let span = crate::handles::trace::acquire(self.name.key(), &self.kind, wait);
        let res = self
            .send(crate::actors::messages::AwaitLatch { wait })
            .instrument(span.clone())
            .await;
        crate::handles::trace::opened(&span, &res);
        res
    }

    /// The free permits, or a latch's count, read without a message (a plain GET).
    async fn read(&self) -> Result<i64, LockError> {
        self.mgr.check(&self.name)?;
        self.mgr.commands.read_counter(self.name.key()).await
    }
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(self.kind.label())
            .field("name", &self.name)
            .finish()
    }
}
