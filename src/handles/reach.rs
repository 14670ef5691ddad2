//! How a handle reaches the actor of its name: the address it reached last, kept weakly (so an
//! idle actor still stops) and shared by its clones, or else a resolve through the Registry. It
//! spares a round trip to the registry, which matters when that is a hop to another thread
//! (lockman's own System). A stale address costs one `Closed` and a resolve.

use std::sync::{Arc, Mutex};

use actix::dev::ToEnvelope;
use actix::{Actor, Addr, Handler, MailboxError, Message, WeakAddr};

use crate::error::LockError;

/// How often a request is sent again when the actor it resolved stopped at that very moment.
const RESOLVE_ATTEMPTS: usize = 8;

/// The actor a handle reached last.
pub(crate) struct Reach<A: Actor>(Arc<Mutex<Option<WeakAddr<A>>>>);

impl<A: Actor> Clone for Reach<A> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<A: Actor> Default for Reach<A> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<A: Actor> Reach<A> {
    /// Sends the message `make` builds to the actor, resolving it with `resolve` when none is
    /// remembered or the remembered one stopped before handling it (nothing happened then).
    pub(crate) async fn send<M, F>(
        &self,
        resolve: impl Fn() -> F,
        mut make: impl FnMut() -> M,
    ) -> Result<M::Result, LockError>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        A: Handler<M>,
        A::Context: ToEnvelope<A, M>,
        F: Future<Output = Result<Addr<A>, LockError>>,
    {
        for _ in 0..RESOLVE_ATTEMPTS {
            let actor = match self.cached() {
                Some(actor) => actor,
                None => {
                    let actor = resolve().await?;
                    if let Ok(mut slot) = self.0.lock() {
                        *slot = Some(actor.downgrade());
                    }
                    actor
                }
            };
            match actor.send(make()).await {
                Ok(reply) => return Ok(reply),
                Err(MailboxError::Closed) => {
                    if let Ok(mut slot) = self.0.lock() {
                        *slot = None;
                    }
                }
                Err(MailboxError::Timeout) => break,
            }
        }
        Err(LockError::Shutdown)
    }

    /// The remembered actor, when it is still running.
    fn cached(&self) -> Option<Addr<A>> {
        let slot = self.0.lock().ok()?;
        slot.as_ref()?.upgrade().filter(Addr::connected)
    }
}
