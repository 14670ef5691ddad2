//! [`LockGuard`]: one hold of a lock, as the handles give it out.

use std::sync::Arc;

use crate::actors::lock_actor::Grant;
use crate::actors::lock_actor::Release;

use crate::error::LockError;
use crate::handles::scope::Watched;
use crate::handles::state::Inner;
use crate::protocol::Registration;

/// One hold of a lock. Release it with [`release`](Self::release) to learn the outcome; dropping
/// it releases in the background. It knows when the lock was lost (expired, deleted, force
/// unlocked, not renewable for a whole watchdog timeout): see [`is_lost`](Grant::is_lost).
///
/// It wraps the [`Grant`] its lock actor replied with, and dereferences to it for the hold's
/// name, holder, kind, token and lost signal.
#[must_use = "dropping a guard releases the lock at once"]
pub struct LockGuard {
    grant: Grant,
    /// Keeps the manager (and its renewals) running while the guard lives.
    manager: Option<Arc<Inner>>,
    /// Keeps a group lock's members known to its lock actor while the guard lives.
    group: Option<Arc<Registration>>,
}

impl From<Grant> for LockGuard {
    fn from(grant: Grant) -> Self {
        Self {
            grant,
            manager: None,
            group: None,
        }
    }
}

impl LockGuard {
    /// The guard of `grant`, keeping its `manager` and its lock's `group` (a group lock's).
    pub(super) fn new(grant: Grant, manager: Arc<Inner>, group: Option<Arc<Registration>>) -> Self {
        Self {
            grant,
            manager: Some(manager),
            group,
        }
    }

    /// The manager that granted it (none for a guard made from a bare [`Grant`]).
    pub(crate) fn manager(&self) -> Option<&Arc<Inner>> {
        self.manager.as_ref()
    }

    /// The lock name as given, without the [name prefix](crate::Config::name_prefix), as
    /// [`Lock::name`](crate::Lock::name); [`key`](Self::key) is the name with it.
    pub fn name(&self) -> &str {
        match &self.manager {
            Some(manager) => manager.unmap_name(self.grant.name()),
            None => self.grant.name(),
        }
    }

    /// The Redis key of the lock: the name with the [name prefix](crate::Config::name_prefix),
    /// as [`Lock::key`](crate::Lock::key).
    pub fn key(&self) -> &str {
        self.grant.name()
    }

    /// The grant inside: what a [`Release`] message carries.
    pub fn into_grant(self) -> Grant {
        self.grant
    }

    /// Runs `fut` while the hold is held and guaranteed, and drops it (so its work stops at
    /// its next await) as soon as the hold is known lost or its [`valid_until`](Grant::valid_until) comes
    /// within a margin — a tenth of the hold's TTL — with no renewal confirmed since.
    ///
    /// # Errors
    /// [`LockError::HoldLost`] or [`LockError::HoldExpiring`], saying which stopped the work.
    /// Either way the guard is still there to release (or drop).
    pub async fn scope<F: std::future::Future>(&self, fut: F) -> Result<F::Output, LockError> {
        self.watched(None).run(fut).await
    }

    /// As [`scope`](Self::scope), stopping the work `margin` before [`valid_until`](Grant::valid_until)
    /// instead of a tenth of the TTL before.
    ///
    /// # Errors
    /// As [`scope`](Self::scope).
    pub async fn scope_with_margin<F: std::future::Future>(
        &self,
        margin: std::time::Duration,
        fut: F,
    ) -> Result<F::Output, LockError> {
        self.watched(Some(margin)).run(fut).await
    }

    fn watched(&self, margin: Option<std::time::Duration>) -> Watched<'_> {
        Watched {
            name: self.name(),
            holds: vec![self.grant.signal()],
            quorum: 1,
            deadline: None,
            margin,
        }
    }

    /// Releases this hold: the lock is free once every hold of its holder is released.
    ///
    /// # Errors
    /// [`LockError::NotHeld`] when the lock was lost meanwhile. On a Redis error or time-out the
    /// release may or may not have run: its lock actor sends the same request again in the
    /// background until Redis answers (the script recognises a request it already ran and
    /// replies as it did), so the hold is released exactly once and never stays renewed. A guard
    /// dropped without `release` goes the same way.
    ///
    /// A hold is released once: `release` takes the guard, so a second call does not compile.
    ///
    /// ```compile_fail
    /// # async fn demo(lock: lockman::Lock) -> Result<(), lockman::LockError> {
    /// let guard = lock.acquire().await?;
    /// guard.release().await?;
    /// guard.release().await?; // error[E0382]: use of moved value: `guard`
    /// # Ok(()) }
    /// ```
    pub fn release(self) -> impl Future<Output = Result<(), LockError>> {
        // Taken apart before the future is made (nothing is sent before its first poll): an
        // `async fn` kept the whole guard beside the parts taken out of it, for the whole
        // release.
        let Self {
            grant,
            manager,
            group,
        } = self;
        async move {
            let span = crate::handles::trace::release(grant.name(), &grant.kind());
            let actor = grant.actor_link();
            // Untraced, the request is awaited where it is made (no copy of it into a wrapper's
            // future); traced, it is boxed (`trace::within`).
            let res = if span.is_disabled() {
                actor.send(Release(grant)).await
            } else {
                crate::handles::trace::within(&span, actor.send(Release(grant))).await
            };
            // The error made only when it is the answer (`unwrap_or`'s, made eagerly, was dropped
            // on every release).
            let res = match res {
                Ok(res) => res,
                Err(_) => Err(LockError::Shutdown),
            };
            crate::handles::trace::released(&span, &res);
            drop(manager);
            drop(group);
            res
        }
    }
}

/// The hold's name, holder, kind, token and lost signal: [`Grant::name`], [`Grant::is_lost`],
/// [`Grant::lost`] and the rest.
impl std::ops::Deref for LockGuard {
    type Target = Grant;

    fn deref(&self) -> &Grant {
        &self.grant
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name())
            .field("holder", &self.holder_id())
            .field("kind", &self.kind())
            .field("lost", &self.is_lost())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `release` returns `impl Future` since it takes the guard apart first: its future must
    /// stay `Send` and `'static`, as the `async fn`'s was (callers spawn it). Checked when the
    /// test compiles: a future that is not breaks the build.
    #[test]
    fn the_release_future_is_send_and_static() {
        fn send_static<F: Future + Send + 'static>(_: &F) {}
        fn check(guard: LockGuard) {
            let release = guard.release();
            send_static(&release);
        }
        let _ = check;
    }
}
