//! [`Lock`], the handle on one reentrant lock, and [`LockGuard`], one hold of it.

use std::sync::Arc;
use std::time::Duration;

mod fair;
mod fenced;
mod group;
mod guard;
mod info;
mod read_write;

pub use fair::FairLock;
pub use fenced::{FencedGuard, FencedLock};
pub use group::GroupLock;
pub use guard::LockGuard;
pub use info::{Holding, LockInfo, LockShape, QueuedWaiter};
pub use read_write::{ReadLock, ReadWriteLock, WriteLock};

use crate::actors::lock_actor::Acquire;
use crate::actors::lock_actor::{Grant, LockActor};
use crate::actors::name::Wait;
use crate::error::{LockError, Site};
use crate::handles::name::Name;
use crate::handles::reach::Reach;
use crate::handles::state::Inner;
use crate::protocol::{LockKind, Registration};

/// A handle on one lock, with one **holder** identity (`<client id>:<n>`, see
/// [`holder_id`](Self::holder_id)): the reentrant lock from [`LockManager::lock`], and the core
/// that [`FencedLock`], [`ReadLock`] and [`WriteLock`] share (they dereference to it).
///
/// Clones share the holder, so acquiring through a clone re-enters: the lock is free again after
/// as many releases as acquisitions. Each successful acquire returns a [`LockGuard`].
///
/// [`LockManager::lock`]: crate::LockManager::lock
#[derive(Clone)]
pub struct Lock {
    mgr: Arc<Inner>,
    name: Name,
    holder: Arc<str>,
    kind: LockKind,
    /// How it reaches the name's actor: the one its last grant came from, while it lives.
    actor: Reach<LockActor>,
    /// A group lock's members, known to its lock actor while this lives (and its guards).
    group: Option<Arc<Registration>>,
}

impl Lock {
    pub(crate) fn new(mgr: Arc<Inner>, name: Name, holder: Arc<str>, kind: LockKind) -> Self {
        Self {
            mgr,
            name,
            holder,
            kind,
            actor: Reach::default(),
            group: None,
        }
    }

    /// This handle, reaching the name's actor through `actor` (the directory's shared address)
    /// while it lives.
    pub(crate) fn reaching(mut self, actor: std::sync::Weak<actix::Addr<LockActor>>) -> Self {
        self.actor = Reach::at(actor);
        self
    }

    /// The same holder as a group lock over the members `group` registers.
    pub(crate) fn as_group(&self, group: Registration) -> Self {
        let mut lock = self.as_kind(LockKind::Group);
        lock.group = Some(Arc::new(group));
        lock
    }

    /// The same holder on the same name, as another kind (the sides of a read-write lock).
    pub(crate) fn as_kind(&self, kind: LockKind) -> Self {
        Self::new(
            self.mgr.clone(),
            self.name.clone(),
            self.holder.clone(),
            kind,
        )
    }

    /// Which kind of lock this handle takes.
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// The lock name as given, without the [name prefix](crate::Config::name_prefix); the
    /// Redis key of its hash is [`key`](Self::key).
    pub fn name(&self) -> &str {
        self.name.given()
    }

    /// The Redis key of its hash: the name with the [name prefix](crate::Config::name_prefix),
    /// from which every key and channel of the lock is built.
    pub fn key(&self) -> &str {
        self.name.key()
    }

    /// This handle's holder: `<client uuid>:<n>`, the hash field Redis keeps its count in.
    pub fn holder_id(&self) -> String {
        self.holder.to_string()
    }

    /// Takes the lock, waiting as long as it takes; the watchdog renews it while the guard lives.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an empty name, [`LockError::WrongType`] when the key is
    /// not a lock, [`LockError::Shutdown`] after shutdown. Redis errors are retried while waiting; a wait that ends with Redis away
    /// fails with [`LockError::Unavailable`] (at its deadline, or after
    /// [`Config::unavailable_after`](crate::Config::unavailable_after)): see
    /// [When Redis is away](crate#when-redis-is-away).
    ///
    /// # Cancel safety
    /// Dropping the future removes the waiter; a grant that arrives after that is released.
    #[track_caller]
    pub fn acquire(&self) -> impl Future<Output = Result<LockGuard, LockError>> + '_ {
        let site = crate::handles::deadlock::site();
        self.request_as(site, None, Wait::Forever, granted)
    }

    /// Takes the lock for `lease`, waiting as long as it takes. No renewal: the lock expires by
    /// itself after `lease`, and the guard then reports it lost.
    ///
    /// A re-entry (this holder holds it already) never moves the hold's end earlier: the hold
    /// lasts until the longest lease of its grants ends (a shorter re-entry and its release
    /// leave the key's PTTL as it was). A hold re-entered without a lease
    /// ([`acquire`](Self::acquire)) is renewed by the watchdog until it is released entirely.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), and [`LockError::InvalidArgument`] for a lease under 1 ms.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    #[track_caller]
    pub fn acquire_with_lease(
        &self,
        lease: Duration,
    ) -> impl Future<Output = Result<LockGuard, LockError>> + '_ {
        let site = crate::handles::deadlock::site();
        self.request_as(site, Some(lease), Wait::Forever, granted)
    }

    /// One attempt: the guard, or `None` when someone else holds the lock.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), and any Redis error (nothing is retried).
    #[track_caller]
    pub fn try_acquire(&self) -> impl Future<Output = Result<Option<LockGuard>, LockError>> + '_ {
        self.request(crate::handles::deadlock::site(), None, Wait::No)
    }

    /// Waits up to `wait` for the lock (watchdog mode); `None` once `wait` has passed with the
    /// lock held ([`LockError::Unavailable`] when Redis was away instead: see
    /// [When Redis is away](crate#when-redis-is-away); a fair waiter first leaves the Redis queue: one round trip more).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    #[track_caller]
    pub fn try_acquire_for(
        &self,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<LockGuard>, LockError>> + '_ {
        self.request(crate::handles::deadlock::site(), None, Wait::Up(wait))
    }

    /// Waits up to `wait` for the lock, taken for `lease`; `None` once `wait` has passed with
    /// it held ([`LockError::Unavailable`] when Redis was away instead: see
    /// [When Redis is away](crate#when-redis-is-away)).
    ///
    /// # Errors
    /// As [`acquire_with_lease`](Self::acquire_with_lease).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    #[track_caller]
    pub fn try_acquire_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> impl Future<Output = Result<Option<LockGuard>, LockError>> + '_ {
        self.request(
            crate::handles::deadlock::site(),
            Some(lease),
            Wait::Up(wait),
        )
    }

    /// Deletes the lock whoever holds it and wakes its waiters (a fair lock's: the head of its
    /// queue, on its own channel, after waiters whose deadline passed are dropped, as Redisson's
    /// does; a spin lock's publishes nothing, as Redisson's, and its waiters find it free at
    /// their next attempt). `Ok(false)` when it was not locked. The holder's guards learn of it
    /// at their next renewal.
    ///
    /// # Errors
    /// [`LockError::WrongType`] (the key is left alone), Redis errors.
    pub async fn force_unlock(&self) -> Result<bool, LockError> {
        self.mgr.check(&self.name)?;
        if let Some(group) = &self.group {
            let removed = self
                .mgr
                .commands
                .force_unlock_group(self.name.key(), group.members())
                .await?;
            return Ok(removed > 0);
        }
        self.mgr
            .commands
            .force_unlock(self.kind, self.name.key())
            .await
    }

    /// Whether anyone holds the lock.
    ///
    /// # Errors
    /// [`LockError::WrongType`], Redis errors.
    pub async fn is_locked(&self) -> Result<bool, LockError> {
        Ok(self.inspect().await?.locked)
    }

    /// Whether this handle's holder holds the lock (for a read-write lock: this side of it).
    ///
    /// # Errors
    /// [`LockError::WrongType`], Redis errors.
    pub async fn is_held(&self) -> Result<bool, LockError> {
        Ok(self.inspect().await?.count > 0)
    }

    /// How many times this handle's holder holds the lock (0 when it does not).
    ///
    /// # Errors
    /// [`LockError::WrongType`], Redis errors.
    pub async fn hold_count(&self) -> Result<u32, LockError> {
        Ok(self.inspect().await?.count)
    }

    /// How long the lock stays held without renewal; `None` when nobody holds it.
    ///
    /// # Errors
    /// [`LockError::WrongType`], Redis errors.
    pub async fn remaining_ttl(&self) -> Result<Option<Duration>, LockError> {
        Ok(self.inspect().await?.ttl)
    }

    /// The deployment of this lock's manager: members with one label are on one server.
    pub(crate) fn server(&self) -> &str {
        self.mgr.commands.endpoint().label()
    }

    /// How long Redis may be away during a wait of this lock's manager
    /// ([`Config::unavailable_after`](crate::Config::unavailable_after)).
    pub(crate) fn unavailable_after(&self) -> Duration {
        self.mgr.config.get_unavailable_after()
    }

    /// How long a bounded wait's last try on this lock's manager may take past the deadline
    /// ([`Config::last_try_grace`](crate::Config::last_try_grace)).
    pub(crate) fn last_try_grace(&self) -> Duration {
        self.mgr.config.last_try_grace()
    }

    /// The watchdog timeout of this lock's manager: the lease of a hold taken without one.
    pub(crate) fn watchdog_timeout(&self) -> Duration {
        self.mgr.config.get_watchdog_timeout()
    }

    async fn inspect(&self) -> Result<crate::protocol::Inspection, LockError> {
        self.mgr.check(&self.name)?;
        self.mgr
            .commands
            .inspect(self.kind, self.name.key(), &self.holder)
            .await
    }

    /// Sends an [`Acquire`] to the name's lock actor (resolving it again if it stopped
    /// meanwhile) and wraps its grant; `site` is where the caller's code asked (the public verbs
    /// are `#[track_caller]`: a deadlock's message names it).
    pub(crate) fn request(
        &self,
        site: Site,
        lease: Option<Duration>,
        wait: Wait,
    ) -> impl Future<Output = Result<Option<LockGuard>, LockError>> + '_ {
        self.request_as(site, lease, wait, Ok)
    }

    /// [`request`](Self::request), its guard (or none) handed to `answer`, in the request's
    /// own future: an unbounded wait's answer wrapped in a second `async` block kept a second
    /// state machine around it, a copy of `site`, and moved the reply through both. An `async`
    /// block rather than an `async fn`: the function's future kept its arguments twice (as
    /// given, and moved into its body), 64 bytes copied with it.
    #[allow(clippy::manual_async_fn)] // an `async fn` keeps its arguments twice: see above
    fn request_as<T>(
        &self,
        site: Site,
        lease: Option<Duration>,
        wait: Wait,
        answer: impl FnOnce(Option<LockGuard>) -> Result<T, LockError>,
    ) -> impl Future<Output = Result<T, LockError>> {
        async move {
            // The cheap check on every call; the registry checks the whole name (its slots, in a
            // cluster) when it starts the name's actor.
            self.name.validate()?;
            let key = self.name.key();
            let resolve = || self.mgr.lock_actor(self.kind, key.clone());
            // The caller's task (or scope): `deadlock` says why.
            let owner = Some(crate::handles::deadlock::current());
            let acquire = || Acquire {
                holder: self.holder.clone(),
                lease,
                wait,
                kind: self.kind,
                owner,
                site: Some(site.clone()),
            };
            let span = crate::handles::trace::acquire(key, &self.kind, wait);
            let called = std::time::Instant::now();
            // A new handle of a name whose actor lives: the address its grants carry, from the
            // directory (no allocation, where `resolve`'s actix address allocates twice).
            let shared = || self.mgr.directory.shared(self.kind, key);
            // Untraced, the request's future is awaited where it is made: handed to a wrapper, it
            // was copied into the wrapper's future and again into its await (a memcpy of some
            // hundred bytes each, per acquire). Traced, it is boxed (`trace::acquiring`).
            let sent = if span.is_disabled() {
                self.actor.send(shared, resolve, acquire, granted_by).await
            } else {
                let (commands, own) = (&self.mgr.commands, &*self.holder);
                let send = self.actor.send(shared, resolve, acquire, granted_by);
                crate::handles::trace::acquiring(&span, commands, key, own, send).await
            };
            let (granted, fresh) = match sent {
                Ok((reply, fresh)) => (reply, fresh),
                Err(e) => (Err(e), false),
            };
            // An outage's `waited` is the caller's, from its call: the actor counts from when the
            // request reached it (after it started, a manager's first wait writes its record).
            let granted = granted.map_err(|e| e.waited_for(called.elapsed()));
            crate::handles::trace::acquired(&span, &granted, Grant::waited);
            let granted = granted?;
            if let (Some(grant), true) = (&granted, fresh) {
                // Its first grant through this handle, not from the directory's address: the next
                // handles of the name find it there.
                let directory = &self.mgr.directory;
                directory.share(self.kind, key, grant.actor_shared());
            }
            let (mgr, group) = (&self.mgr, &self.group);
            answer(granted.map(|grant| LockGuard::new(grant, mgr.clone(), group.clone())))
        }
    }
}

/// An unbounded wait's answer: its guard, or [`LockError::Shutdown`] when it ended without one
/// (the error made only when it is the answer: `ok_or`'s, made eagerly, was dropped on every
/// grant).
fn granted(guard: Option<LockGuard>) -> Result<LockGuard, LockError> {
    match guard {
        Some(guard) => Ok(guard),
        None => Err(LockError::Shutdown),
    }
}

/// The actor that granted the hold an acquire's `reply` carries, if it carries one.
fn granted_by(reply: &Result<Option<Grant>, LockError>) -> Option<&Arc<actix::Addr<LockActor>>> {
    match reply {
        Ok(Some(grant)) => Some(grant.actor_shared()),
        _ => None,
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("holder", &self.holder)
            .finish()
    }
}
