//! How a handle reaches the actor of its name: through the actor its last grant came from while
//! that actor keeps its own address (busy, or lingering idle), else through the manager (its
//! `Directory` of live actors, the one cache from a name to its actor, else the Registry, which
//! starts one). A request is sent again when the actor it reached stopped at that very moment
//! (it comes back `Closed`, unhandled).

use std::sync::{Arc, Mutex, Weak};

use actix::dev::ToEnvelope;
use actix::{Actor, Addr, Handler, MailboxError, Message};

use crate::error::LockError;

/// How often a request is sent again when the actor it resolved stopped at that very moment.
const RESOLVE_ATTEMPTS: usize = 8;

/// How a handle's requests reach the actor of its name. It keeps only a weak reference to the
/// address its last grant shared (the actor's own, kept while it is busy or lingers): no
/// allocation per handle, and an idle actor still stops; a handle made per request finds a live
/// actor through its manager's directory, as a kept one does the first time.
pub(crate) struct Reach<A: Actor> {
    /// The address the last grant through this handle shared, weak. Upgrading it costs no
    /// allocation, where the directory's weak actix address allocates twice per upgrade.
    last: Mutex<Weak<Addr<A>>>,
}

impl<A: Actor> Clone for Reach<A> {
    fn clone(&self) -> Self {
        let last = self.last.lock().map(|w| w.clone()).unwrap_or_default();
        Self {
            last: Mutex::new(last),
        }
    }
}

impl<A: Actor> Default for Reach<A> {
    fn default() -> Self {
        Self {
            last: Mutex::new(Weak::new()),
        }
    }
}

impl<A: Actor> Reach<A> {
    /// Reaching `actor` (a shared address, weak) while it lives.
    pub(crate) fn at(actor: Weak<Addr<A>>) -> Self {
        Self {
            last: Mutex::new(actor),
        }
    }

    /// Remembers the actor a grant came from, for this handle's next requests; `true` when
    /// it is not the one this handle reached before (its first grant, or a new actor).
    fn remember(&self, actor: &Arc<Addr<A>>) -> bool {
        if let Ok(mut last) = self.last.lock()
            && !std::ptr::eq(last.as_ptr(), Arc::as_ptr(actor))
        {
            *last = Arc::downgrade(actor);
            return true;
        }
        false
    }

    /// The remembered actor, while it keeps its address and runs.
    fn known(&self) -> Option<Arc<Addr<A>>> {
        let actor = self.last.lock().ok()?.upgrade()?;
        actor.connected().then_some(actor)
    }

    /// Sends the message `make` builds to the remembered actor, else to the one `shared` knows
    /// (remembered then: a new handle of a live actor's name), else to the actor `resolve`
    /// finds, resolving it again when it stopped before handling it (nothing happened then).
    /// Then remembers the actor `granted_by` names in the reply, if any; the flag says it was
    /// not the one remembered before (its first grant through this handle, or a new actor).
    /// A reply from the actor the message reached, the usual one, takes no lock.
    #[allow(clippy::manual_async_fn)] // an `async fn` keeps its arguments twice: see below
    pub(crate) fn send<M, F>(
        &self,
        shared: impl FnOnce() -> Option<Arc<Addr<A>>>,
        resolve: impl Fn() -> F,
        mut make: impl FnMut() -> M,
        granted_by: impl FnOnce(&M::Result) -> Option<&Arc<Addr<A>>>,
    ) -> impl Future<Output = Result<(M::Result, bool), LockError>>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        A: Handler<M>,
        A::Context: ToEnvelope<A, M>,
        F: Future<Output = Result<Addr<A>, LockError>>,
    {
        // An `async` block, not an `async fn`: the function's future kept its arguments (the
        // closures) twice, as given and moved into its body.
        async move {
            let reached = self.known().or_else(|| {
                let actor = shared()?;
                self.remember(&actor);
                Some(actor)
            });
            if let Some(actor) = reached {
                match actor.send(make()).await {
                    Ok(reply) => {
                        let fresh = match granted_by(&reply) {
                            Some(by) if !Arc::ptr_eq(by, &actor) => self.remember(by),
                            _ => false,
                        };
                        return Ok((reply, fresh));
                    }
                    // It stopped meanwhile: the directory knows its successor, or the registry
                    // starts one.
                    Err(MailboxError::Closed) => {}
                    Err(MailboxError::Timeout) => return Err(LockError::Shutdown),
                }
            }
            // Boxed: the registry's resolution (its future, and a second send's) is not every
            // request's, and inline it made each request's future and its poll's code larger.
            let reply = Box::pin(resolving(resolve, make)).await?;
            let fresh = granted_by(&reply).is_some_and(|by| self.remember(by));
            Ok((reply, fresh))
        }
    }
}

/// Sends the message `make` builds to the actor `resolve` finds, resolving it again when it
/// stopped before handling it (nothing happened then).
async fn resolving<A, M, F>(
    resolve: impl Fn() -> F,
    mut make: impl FnMut() -> M,
) -> Result<M::Result, LockError>
where
    A: Actor + Handler<M>,
    M: Message + Send + 'static,
    M::Result: Send,
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
