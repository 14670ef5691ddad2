//! The public façade: [`LockManager`] connects and hands out [`Lock`] handles.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use actix::Addr;
use uuid::Uuid;

use super::state::Inner;
use crate::actors::lock_actor::LockActor;
use crate::actors::messages::{CountLive, Shutdown};
use crate::config::Config;
use crate::error::LockError;
use crate::handles::lock::FairLock;
use crate::handles::lock::FencedLock;
use crate::handles::lock::Lock;
use crate::handles::lock::ReadWriteLock;
use crate::handles::runtime::Host;
use crate::protocol::LockKind;
use crate::protocol::keys;

/// The start of the names of [`LockManager::diagnose`]'s scratch locks
/// (`lockman-doctor:<uuid>`).
const DOCTOR_NAME: &str = "lockman-doctor";

/// How much longer than the connect timeout starting may take before it counts as stuck.
const STARTUP_GRACE: Duration = Duration::from_secs(1);

/// The entry point: one connection to one Redis server, one **client id**, and the actors that
/// serve every lock taken through it. Cheap to clone; clones share everything.
///
/// Dropping the last handle (manager, lock or guard) stops renewals without releasing: locks still
/// held then expire within the watchdog timeout. Call [`shutdown`](Self::shutdown) to release.
#[derive(Clone)]
pub struct LockManager {
    pub(crate) inner: Arc<Inner>,
}

impl LockManager {
    /// Connects to Redis and starts the actors: on the current actix arbiter if there is one,
    /// otherwise on an actix System of lockman's own, on a background thread.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for a bad setting or URL; [`LockError::Connect`] or
    /// [`LockError::Timeout`] when Redis cannot be reached within the connect timeout;
    /// [`LockError::Tls`] when the TLS handshake fails (untrusted certificate, wrong host name,
    /// not a TLS port); [`LockError::Auth`] for a wrong user or password;
    /// [`LockError::NoPermission`] when the user's ACL refuses something every lock needs
    /// (SCRIPT LOAD, EVALSHA, PUBLISH or SUBSCRIBE on the lock channels).
    pub async fn start(config: Config) -> Result<Self, LockError> {
        config.validate()?;
        let config = Arc::new(config);
        let config_limit = config.get_connect_timeout();
        let host = Host::current_or_spawn(config.get_arbiters()).await?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (settings, more) = (config.clone(), host.more.clone());
        host.arbiter.spawn(async move {
            let _ = tx.send(crate::actors::system::start(settings, more).await);
        });
        // An arbiter that is not running (an actix System created on this thread but not driving
        // it) never runs the setup: fail instead of hanging.
        let limit = config_limit + STARTUP_GRACE;
        let started = match tokio::time::timeout(limit, rx).await {
            Ok(reply) => reply.map_err(|_| LockError::Shutdown)??,
            Err(_) => {
                return Err(LockError::Timeout {
                    op: "start",
                    after: limit,
                });
            }
        };
        let (registry, commands) = (started.registry, started.commands);
        let directory = started.directory;
        let client_id = started.client_id;
        let deployment = config.deployment().label();
        tracing::info!(%client_id, %deployment, own_system = host.owned.is_some(), "lock manager started");
        if config.deployment().insecure_tls() {
            // `#insecure` is a test server's setting: said once per manager, so that it is
            // not left on in production unnoticed.
            tracing::warn!(
                %deployment,
                "TLS certificate and host checks are OFF (#insecure in the URL): anyone in the \
                 middle can read and change every command"
            );
        }
        let next_holder = AtomicU64::new(0);
        let manager = Self {
            inner: Arc::new(Inner {
                client_id,
                holder_prefix: keys::HolderPrefix::of(&client_id),
                registry,
                directory,
                commands,
                config,
                next_holder,
                host,
            }),
        };
        if let Err(e) = manager.check_eviction().await {
            manager.shutdown().await;
            return Err(e);
        }
        Ok(manager)
    }

    /// The start-time eviction check: a `maxmemory-policy` that can evict lock keys is warned
    /// about once (and set on the `lockman_evicting_server` gauge), or refused with
    /// [`LockError::EvictingServer`] under [`Config::refuse_evicting_server`]. A server that
    /// does not say its policy passes: the diagnosis says what could not be read.
    async fn check_eviction(&self) -> Result<(), LockError> {
        let policy = match self.inner.commands.eviction_policy().await {
            Ok(Some(policy)) => policy,
            Ok(None) => return Ok(()),
            Err(e) => {
                tracing::debug!(error = %e, "the eviction policy could not be read");
                return Ok(());
            }
        };
        let evicts = crate::diagnose::evicts_locks(&policy);
        crate::metrics::evicting_server(evicts);
        if !evicts {
            return Ok(());
        }
        let url = self.inner.commands.endpoint().label().to_owned();
        if self.inner.config.get_refuse_evicting_server() {
            return Err(LockError::EvictingServer { url, policy });
        }
        tracing::warn!(
            %url,
            %policy,
            "the server may evict lock keys: {}; set maxmemory-policy noeviction",
            crate::diagnose::eviction_risk(&policy)
        );
        Ok(())
    }

    /// The server's `maxmemory-policy`, read now, when it may evict lock keys (anything but
    /// `noeviction`: see [`Config::refuse_evicting_server`]); `None` when it evicts no lock key
    /// or does not say (the `lockman` command warns with it before it takes a hold).
    ///
    /// # Errors
    /// As any command: [`LockError::Timeout`], [`LockError::Redis`] (an ACL that refuses `INFO`).
    pub async fn evicting_policy(&self) -> Result<Option<String>, LockError> {
        let policy = self.inner.commands.eviction_policy().await?;
        Ok(policy.filter(|policy| crate::diagnose::evicts_locks(policy)))
    }

    /// What this deployment guarantees to locks, read from the server and tried on it now, one
    /// [`Check`](crate::Check) per concern: server and version, TLS, scripting, `LPOS`, sharded
    /// pub/sub, permissions, a scratch lock of every kind, eviction policy, persistence,
    /// replicas, keyspace notifications, the clock offset, and the round trip against the
    /// timeouts (the `lockman doctor` command; a health endpoint can serve it).
    ///
    /// It takes and gives back scratch locks of its own, named `lockman-doctor:<uuid>` (under
    /// the name prefix), as every kind (plain, non-reentrant, fair, read, write; the fenced
    /// lock's token counter is read, not written), with the configured replica sync (`WAIT`
    /// after each acquire), and a permit of a scratch semaphore and permit semaphore
    /// (`lockman-doctor:<uuid>:s`, `:p`, whose counters expire within 10 s) and counts down a
    /// scratch latch (`:c`): a refusal on the way is a failed check in the server's own words.
    /// On one server its reads go through a connection of its own; in a cluster it reads what
    /// the master of slot 0 says.
    ///
    /// # Errors
    /// [`LockError::Connect`] or [`LockError::Timeout`] when the server cannot be reached or
    /// stops answering, [`LockError::Redis`] when a connection breaks on the way: no diagnosis
    /// is made of answers that never came.
    pub async fn diagnose(&self) -> Result<crate::diagnose::Diagnosis, LockError> {
        let facts = self.inner.commands.facts().await?;
        let id = self.inner.client_id;
        let holders = std::array::from_fn(|_| self.inner.new_holder());
        let name = self.inner.name(format!("{DOCTOR_NAME}:{}", Uuid::new_v4()));
        self.inner.check(&name)?;
        let lane = format!("{id}:d");
        let trial = self
            .inner
            .commands
            .trial(name.key(), &holders, &lane)
            .await?;
        Ok(crate::diagnose::judge(&facts, &trial, &self.inner.config))
    }

    /// [`start`](Self::start) with the default settings.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::start(Config::new(url)).await
    }

    /// This manager's client id: the first part of every holder it creates.
    pub fn client_id(&self) -> Uuid {
        self.inner.client_id
    }

    /// A handle on the reentrant lock `name`, with a new **holder** identity: two calls give two
    /// holders that exclude each other; clones of one handle share its holder and re-enter.
    /// The name is checked when the handle is used (an empty one is refused).
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        let holder = self.inner.new_holder();
        // A handle made per request of a live name shares its key and reaches its actor from
        // the directory: one look-up, no key made.
        let (name, actor) = self.inner.lock_name(LockKind::Reentrant, name);
        Lock::new(self.inner.clone(), name, holder, LockKind::Reentrant).reaching(actor)
    }

    /// A handle on the **fair lock** `name`: waiters, in every process, acquire in the order they
    /// arrived (a FIFO queue in Redis). New holder, as [`lock`](Self::lock).
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock::new(self.lock(name).as_kind(LockKind::Fair))
    }

    /// A handle on the **non-reentrant lock** `name` (Redisson 4.4's `getNonReentrantLock`): the
    /// reentrant lock's keys, field and channel, so Java's `RLock` and non-reentrant lock on the
    /// same name exclude it and are woken by it; but an acquire by the holder that already holds
    /// it (this handle or a clone) fails with [`LockError::AlreadyHeld`] and changes nothing in
    /// Redis, where [`lock`](Self::lock) would re-enter. New holder, as [`lock`](Self::lock).
    pub fn non_reentrant_lock(&self, name: impl Into<String>) -> Lock {
        self.lock(name).as_kind(LockKind::NonReentrant)
    }

    /// A handle on the **non-reentrant fair lock** `name` (Redisson 4.4's
    /// `getNonReentrantFairLock`): the [fair lock](Self::fair_lock)'s keys, queue and channels,
    /// refusing an acquire by the holder that already holds it with [`LockError::AlreadyHeld`],
    /// as [`non_reentrant_lock`](Self::non_reentrant_lock). New holder, as [`lock`](Self::lock).
    pub fn non_reentrant_fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock::new(self.lock(name).as_kind(LockKind::NonReentrantFair))
    }

    /// A handle on the **spin lock** `name` (Redisson's `getSpinLock`): the reentrant lock's
    /// hash and acquire, so it excludes [`lock`](Self::lock) and Java's `RLock` and spin lock on
    /// the same name, but its waiters listen on no channel: each retries after a sleep of
    /// [`Config::spin_backoff`](crate::Config::spin_backoff) (by default Redisson's, 1 ms
    /// doubling to 128 ms), and its release publishes nothing. For a name many processes wait
    /// on: a release wakes none of them, and no waiter holds a subscription. Reentrant, leases,
    /// the watchdog, `lost()`, deadlock detection and the local hand-off as [`lock`](Self::lock).
    /// New holder, as [`lock`](Self::lock).
    pub fn spin_lock(&self, name: impl Into<String>) -> Lock {
        self.lock(name).as_kind(LockKind::Spin)
    }

    /// A handle on the **group multi-lock** `group` over `members` (Redisson's
    /// `getMultiLock(group, values)`, `RedissonFasterMultiLock`): each member a field of the
    /// hash `group`, all taken and released together in one script. New holder, as
    /// [`lock`](Self::lock); the group's name is checked when the handle is used.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for no members, more than
    /// [`MAX_GROUP_MEMBERS`](crate::MAX_GROUP_MEMBERS), an empty member, a member containing
    /// `:` (the hash's field names are split on it), or a member given twice.
    pub fn group_lock<I, S>(
        &self,
        group: impl Into<String>,
        members: I,
    ) -> Result<crate::handles::lock::GroupLock, LockError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let members = crate::protocol::check_members(members)?;
        let lock = self.lock(group);
        let registration = self
            .inner
            .commands
            .groups()
            .register(lock.holder_id().into(), members);
        Ok(crate::handles::lock::GroupLock::new(
            lock.as_group(registration),
        ))
    }

    /// A handle on the **fenced lock** `name`: a reentrant lock whose every acquisition carries a
    /// token greater than any handed out before for that name, by any client. New holder, as
    /// [`lock`](Self::lock).
    pub fn fenced_lock(&self, name: impl Into<String>) -> FencedLock {
        FencedLock::new(self.lock(name).as_kind(LockKind::Fenced))
    }

    /// A handle on the **election** `name`: candidates [`campaign`](crate::Election::campaign)
    /// to lead, one at a time, with terms that only grow (the election is the fenced lock
    /// `name`).
    pub fn election(&self, name: impl Into<String>) -> crate::handles::election::Election {
        crate::handles::election::Election::new(self.inner.clone(), self.inner.name(name))
    }

    /// A handle on the **read-write lock** `name`: many readers at once, or one writer. Its
    /// [`read`](ReadWriteLock::read) and [`write`](ReadWriteLock::write) sides share one new
    /// holder, so a writer can also take the read side (downgrade).
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock::new(self.lock(name))
    }

    /// A handle on the **semaphore** `name` (Redisson's `RSemaphore`): permits shared by every
    /// process. The name is checked when the handle is used.
    pub fn semaphore(&self, name: impl Into<String>) -> crate::handles::sync::Semaphore {
        crate::handles::sync::Semaphore::new(self.inner.clone(), self.inner.name(name))
    }

    /// A handle on the **permit semaphore** `name` (Redisson's `RPermitExpirableSemaphore`):
    /// permits with ids that the watchdog renews, or that expire after a lease.
    pub fn permit_semaphore(
        &self,
        name: impl Into<String>,
    ) -> crate::handles::sync::PermitSemaphore {
        crate::handles::sync::PermitSemaphore::new(self.inner.clone(), self.inner.name(name))
    }

    /// A handle on the **count-down latch** `name` (Redisson's `RCountDownLatch`).
    pub fn count_down_latch(
        &self,
        name: impl Into<String>,
    ) -> crate::handles::sync::CountDownLatch {
        crate::handles::sync::CountDownLatch::new(self.inner.clone(), self.inner.name(name))
    }

    /// The synchronizer actor serving the synchronizer of `kind` named `name` now, for actix
    /// users who send it [`AcquirePermits`](crate::actix::AcquirePermits) and the others themselves.
    ///
    /// # Errors
    /// As [`lock_actor`](Self::lock_actor).
    pub async fn sync_actor(
        &self,
        kind: crate::protocol::SyncKind,
        name: &str,
    ) -> Result<Addr<crate::actors::sync_actor::SyncActor>, LockError> {
        let name = self.inner.name(name);
        name.validate()?;
        self.inner.sync_actor(kind, name.key().clone()).await
    }

    /// The lock actor serving `name` now, for actix users who send it [`Acquire`](crate::actix::Acquire)
    /// and [`Release`](crate::actix::Release) themselves. Holding the address keeps that actor alive.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an empty name; [`LockError::Shutdown`] after shutdown.
    pub async fn lock_actor(&self, name: &str) -> Result<Addr<LockActor>, LockError> {
        self.lock_actor_of(LockKind::Reentrant, name).await
    }

    /// The lock actor serving the lock of `kind` named `name` (both sides of a read-write lock
    /// share one). See [`lock_actor`](Self::lock_actor).
    ///
    /// # Errors
    /// As [`lock_actor`](Self::lock_actor).
    pub async fn lock_actor_of(
        &self,
        kind: LockKind,
        name: &str,
    ) -> Result<Addr<LockActor>, LockError> {
        let name = self.inner.name(name);
        name.validate()?;
        self.inner.lock_actor(kind, name.key().clone()).await
    }

    /// Everything Redis holds about the lock `name`, whatever its kind, read in one round trip and
    /// changing nothing: its shape, holders and counts, TTL, read-write mode, fair queue and
    /// fenced token. For diagnostics (the `lockman inspect` command).
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an empty name, [`LockError::WrongType`] when the key is
    /// not a lock, Redis errors.
    pub async fn describe(&self, name: &str) -> Result<crate::handles::lock::LockInfo, LockError> {
        let name = self.inner.name(name);
        self.inner.check(&name)?;
        let described = self.inner.commands.describe(name.key()).await?;
        Ok(crate::handles::lock::LockInfo::new(name.given(), described))
    }

    /// Opens the reentrant lock `name` when its lock-delay closes it (`Config::lock_delay`,
    /// docs/protocol.md "Lock-delay"): when nobody holds the lock, deletes its delay key and
    /// wakes its waiters, so that lockman's clients with a lock-delay take it at once rather
    /// than after the delay. Returns how long the delay had to go; `None` when there was no
    /// delay key, or when the lock is held (a holder's delay key is left: after a
    /// [`force_unlock`](crate::Lock::force_unlock), which leaves it, call this to open the name
    /// fully, as `lockman unlock --force` does). For operators: the delay is there so that a
    /// stale holder's writes drain first.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an empty name, Redis errors
    /// ([`LockError::NoPermission`] without access to `lockman_delay:*` keys).
    pub async fn clear_lock_delay(&self, name: &str) -> Result<Option<Duration>, LockError> {
        let name = self.inner.name(name);
        self.inner.check(&name)?;
        self.inner.commands.clear_delay(name.key()).await
    }

    /// Every live manager's client record (docs/protocol.md, "Client records"), read in one
    /// round trip on one server (on a cluster, the master of the records' slot), changing
    /// nothing: who each manager is (service, host, pid), the holds it has had long enough to
    /// renew, and the names its callers wait on. Records are written at a manager's first hold
    /// or wait and refreshed every third of its watchdog timeout, so what they say is that old
    /// at most. The `lockman ls`, `top` and `inspect` commands.
    ///
    /// Records are unauthenticated hints: anyone who may write `lockman_client:*` can forge
    /// one. Text that is not UTF-8 is read lossily (U+FFFD); a record that is not a hash, or
    /// over the read's bounds (docs/protocol.md, "Client records"), is skipped with one
    /// warning per process, and never fails the read.
    ///
    /// # Errors
    /// Redis errors ([`LockError::NoPermission`] without access to `lockman_client:*` keys).
    pub async fn clients(&self) -> Result<Vec<crate::handles::clients::ClientInfo>, LockError> {
        let (now, records) = self.inner.commands.read_client_records().await?;
        let mut clients: Vec<crate::handles::clients::ClientInfo> = records
            .into_iter()
            .map(|r| crate::handles::clients::ClientInfo::from_record(r, now))
            .collect();
        clients.sort_by(|a, b| (&a.service, &a.host, a.pid).cmp(&(&b.service, &b.host, b.pid)));
        Ok(clients)
    }

    /// Everything Redis holds about the semaphore, permit semaphore or count-down latch `name`,
    /// read in one round trip and changing nothing: its count, TTL and held permits with their
    /// expiry (the `lockman inspect` command).
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] for an empty name, Redis errors.
    pub async fn describe_synchronizer(
        &self,
        name: &str,
    ) -> Result<crate::handles::sync::SyncInfo, LockError> {
        let name = self.inner.name(name);
        self.inner.check(&name)?;
        let described = self.inner.commands.describe_sync(name.key()).await?;
        Ok(crate::handles::sync::SyncInfo::new(name.given(), described))
    }

    /// How many lock and synchronizer actors are alive: one per name with a hold or a waiter in
    /// this process, whose address someone keeps, or that fell idle less than about two
    /// [`idle_linger`](crate::Config::idle_linger)s ago (at most
    /// [`max_lingering`](crate::Config::max_lingering) of those). For diagnostics and tests.
    pub async fn live_lock_actors(&self) -> usize {
        self.inner.registry.send(CountLive).await.unwrap_or(0)
    }

    /// Stops renewals, releases every lock and permit this manager holds, fails its waiters with
    /// [`LockError::Shutdown`], and closes its pub/sub connection. Later calls fail with
    /// `Shutdown`. The command connections close when the last handle (manager, lock, guard)
    /// is dropped.
    pub async fn shutdown(&self) {
        let _ = self.inner.registry.send(Shutdown { release: true }).await;
    }
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager")
            .field("client_id", &self.inner.client_id)
            .finish()
    }
}
