//! How a handle reaches the actor of its name: each request resolves it through the manager
//! (its `Directory` of live actors, the one cache from a name to its actor, else the Registry,
//! which starts one), and is sent again when the actor it reached stopped at that very moment
//! (it comes back `Closed`, unhandled).

use std::marker::PhantomData;

use actix::dev::ToEnvelope;
use actix::{Actor, Addr, Handler, MailboxError, Message};

use crate::error::LockError;

/// How often a request is sent again when the actor it resolved stopped at that very moment.
const RESOLVE_ATTEMPTS: usize = 8;

/// How a handle's requests reach the actor of its name. Holds nothing: handles of a name share
/// their manager's directory, so a handle made per request finds a live actor as a kept one does.
pub(crate) struct Reach<A: Actor>(PhantomData<fn() -> A>);

impl<A: Actor> Clone for Reach<A> {
    fn clone(&self) -> Self {
        Self(PhantomData)
    }
}

impl<A: Actor> Default for Reach<A> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<A: Actor> Reach<A> {
    /// Sends the message `make` builds to the actor `resolve` finds, resolving it again when it
    /// stopped before handling it (nothing happened then).
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
            match resolve().await?.send(make()).await {
                Ok(reply) => return Ok(reply),
                Err(MailboxError::Closed) => {}
                Err(MailboxError::Timeout) => break,
            }
        }
        Err(LockError::Shutdown)
    }
}
