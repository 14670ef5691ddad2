//! How a [`LockManager`](crate::LockManager) reaches Redis and how long things may take.

use std::time::Duration;

mod debug;
mod deployment;
pub(crate) mod redact;
mod spin;
mod validate;

pub use deployment::ShardedSubscription;
pub(crate) use deployment::{Deployment, SentinelSettings, TlsSettings};
pub use redact::redacted_url;
pub use spin::SpinBackOff;

/// Default [`Config::watchdog_timeout`]: Redisson's `lockWatchdogTimeout`.
pub const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
/// Default [`Config::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default [`Config::response_timeout`].
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);
/// Default [`Config::fair_lock_place_timeout`].
pub const DEFAULT_FAIR_LOCK_PLACE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default [`Config::fair_lock_wait_timeout`]: Redisson's.
pub const DEFAULT_FAIR_LOCK_WAIT_TIMEOUT: Duration = Duration::from_secs(300);
/// Default [`Config::unavailable_after`].
pub const DEFAULT_UNAVAILABLE_AFTER: Duration = Duration::from_secs(15);
/// Default [`Config::idle_linger`].
pub const DEFAULT_IDLE_LINGER: Duration = Duration::from_secs(1);
/// Default [`Config::max_lingering`].
pub const DEFAULT_MAX_LINGERING: usize = 10_000;
/// How many contended names get series of their own by default
/// ([`Config::contention_top_k`]).
pub const DEFAULT_CONTENTION_TOP_K: usize = 20;
/// The longest expiry lockman sets, for a lease or the watchdog timeout: 2^53 ms (about 285
/// years), the largest whole number Lua's doubles hold exactly.
pub(crate) const MAX_EXPIRY: Duration = Duration::from_millis(1 << 53);
/// How long a bounded wait's last try may still be under way past the wait's deadline before
/// Redis counts as not answering, without replica sync: a healthy server answers in
/// milliseconds, and a try sent just before the deadline is no outage
/// ([`Config::last_try_grace`] adds the sync timeout).
pub(crate) const LAST_TRY_GRACE: Duration = Duration::from_millis(250);
/// The shortest [`Config::watchdog_timeout`] accepted: renewal runs every third of it.
pub const MIN_WATCHDOG_TIMEOUT: Duration = Duration::from_millis(30);
/// The shortest [`Config::fair_lock_place_timeout`] (and [`Config::fair_lock_wait_timeout`])
/// accepted: a place is refreshed every third of its wait, so it must outlive a refresh period plus the refresh's round trip and the scheduling
/// delays of a busy process. At 100 ms a refresh may come up to about 66 ms late (more than a
/// round trip across a region) before a live waiter's place expires; below it, one pause of the
/// process loses places, and each lock with queued waiters runs 30 refreshes a second or more.
pub const MIN_FAIR_LOCK_PLACE_TIMEOUT: Duration = Duration::from_millis(100);

/// Settings of a [`LockManager`](crate::LockManager): where Redis is, and how long things may
/// take.
///
/// ```
/// use std::time::Duration;
/// let config = lockman::Config::new("rediss://app:secret@redis.internal:6380/0")
///     .watchdog_timeout(Duration::from_secs(10))
///     .response_timeout(Duration::from_secs(1));
/// assert_eq!(config.url(), Some("rediss://app:secret@redis.internal:6380/0"));
/// // Printing a config never shows the password.
/// assert!(!format!("{config:?}").contains("secret"));
/// ```
#[derive(Clone)]
pub struct Config {
    deployment: Deployment,
    password: Option<String>,
    tls: TlsSettings,
    sync_replicas: Option<(u32, Duration)>,
    watchdog_timeout: Duration,
    connect_timeout: Duration,
    response_timeout: Duration,
    fair_lock_wait_timeout: Duration,
    fair_lock_place_timeout: Duration,
    idle_linger: Duration,
    unavailable_after: Duration,
    max_lingering: usize,
    arbiters: Option<usize>,
    client_name: Option<String>,
    contention_top_k: usize,
    name_prefix: String,
    refuse_evicting_server: bool,
    deadlocks: Deadlocks,
    watch_holds: bool,
    lock_delay: Duration,
    spin_backoff: SpinBackOff,
}

/// What a manager does when the waits of its callers close a cycle (a deadlock: task A holds
/// `x` and waits for `y` while task B holds `y` and waits for `x`). See [`crate::deadlock`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Deadlocks {
    /// The youngest wait of the cycle fails with [`LockError::Deadlock`](crate::LockError::Deadlock)
    /// and leaves its queue, so the others go on; the cycle is also reported (a warning, and the
    /// `lockman_deadlocks_total` counter with the `metrics` feature).
    #[default]
    Break,
    /// Only report it: every wait goes on until its own timeout or a lease ends it.
    Report,
    /// Look for none: no waits-for graph is kept.
    Off,
}

impl Config {
    /// A config of `deployment`, every other setting at its default.
    fn with(deployment: Deployment) -> Self {
        Self {
            deployment,
            password: None,
            tls: TlsSettings::default(),
            sync_replicas: None,
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            fair_lock_wait_timeout: DEFAULT_FAIR_LOCK_WAIT_TIMEOUT,
            fair_lock_place_timeout: DEFAULT_FAIR_LOCK_PLACE_TIMEOUT,
            idle_linger: DEFAULT_IDLE_LINGER,
            unavailable_after: DEFAULT_UNAVAILABLE_AFTER,
            max_lingering: DEFAULT_MAX_LINGERING,
            client_name: None,
            contention_top_k: DEFAULT_CONTENTION_TOP_K,
            watch_holds: true,
            lock_delay: Duration::ZERO,
            arbiters: None,
            name_prefix: String::new(),
            refuse_evicting_server: false,
            deadlocks: Deadlocks::Break,
            spin_backoff: SpinBackOff::default(),
        }
    }

    /// How the waiters of every [spin lock](crate::LockManager::spin_lock) of this manager space
    /// their attempts: [`SpinBackOff::default`] (Redisson's: 1 ms doubling to 128 ms, with a
    /// jitter) unless set. Redisson gives it per lock (`getSpinLock(name, backOff)`); here it is
    /// the manager's. A back-off under 1 ms, or a `max` below `initial`, is refused by
    /// [`LockManager::start`](crate::LockManager::start).
    pub fn spin_backoff(mut self, backoff: SpinBackOff) -> Self {
        self.spin_backoff = backoff;
        self
    }

    /// See [`Config::spin_backoff`](Self::spin_backoff()).
    pub fn get_spin_backoff(&self) -> SpinBackOff {
        self.spin_backoff
    }

    /// **Replica sync** (Redisson's `checkLockSyncedSlaves`): after every acquire and every
    /// renewal, wait until at least `count` replicas have the write (`WAIT count timeout`). An
    /// acquire that fewer replicas acknowledged within `timeout` is undone and fails with
    /// [`LockError::ReplicaSync`](crate::LockError::ReplicaSync); a renewal that fewer
    /// acknowledged does not count as a renewal.
    ///
    /// The trade-off: a lock then survives a failover to any of those replicas (the new primary
    /// has it), at the price of one replication round trip per acquire, and acquires fail while
    /// fewer than `count` replicas are up. Without it, a failover can lose a lock that was
    /// granted just before it: two holders at once, which only a fencing token
    /// ([`FencedLock`](crate::FencedLock)) lets storage detect. Measured (RELIABILITY.md):
    /// without it, Sentinel failovers put two holders inside about 2.6 times per failover;
    /// with `sync_replicas(1, 250 ms)` and two replicas, never, for 59 refused acquires in
    /// 200,000. The waits run on a connection
    /// of their own, so they never hold up other commands. In a cluster each script and its
    /// `WAIT` go to the master of the lock's slot: every master needs `count` replicas.
    /// `timeout` must be shorter than the response timeout.
    ///
    /// Default: off.
    pub fn sync_replicas(mut self, count: u32, timeout: Duration) -> Self {
        self.sync_replicas = Some((count, timeout));
        self
    }

    /// Whether [`LockManager::start`](crate::LockManager::start) refuses a server whose
    /// `maxmemory-policy` is anything but `noeviction`, with
    /// [`LockError::EvictingServer`](crate::LockError::EvictingServer), instead of warning once. Every lock key has a TTL, so under memory pressure the
    /// `volatile-*` policies evict exactly lock keys, and the `allkeys-*` ones may: the lock is
    /// then free while its holder still believes it holds it (two holders), and nothing in
    /// Redis says so.
    ///
    /// Default: off (a warning in the log, and the `lockman_evicting_server` gauge with the
    /// `metrics` feature).
    pub fn refuse_evicting_server(mut self, refuse: bool) -> Self {
        self.refuse_evicting_server = refuse;
        self
    }

    /// What to do when the waits of this manager's callers close a cycle: break it (the
    /// youngest wait fails with [`LockError::Deadlock`](crate::LockError::Deadlock)), only
    /// report it, or look for none. Cycles are looked for among this manager's locks of every
    /// kind (not synchronizers: any one permit's release ends a semaphore wait), when the wait
    /// that closes one begins; see [`crate::deadlock`] for whom a wait belongs to.
    ///
    /// Default: [`Deadlocks::Break`].
    pub fn deadlocks(mut self, deadlocks: Deadlocks) -> Self {
        self.deadlocks = deadlocks;
        self
    }

    /// The lease of a lock taken without one. The **watchdog** renews such a lock every third of
    /// this while it is held (from when it has been held a sixth of it); when its holder dies,
    /// the lock expires after at most this long.
    /// At least [`MIN_WATCHDOG_TIMEOUT`].
    ///
    /// Default: [`DEFAULT_WATCHDOG_TIMEOUT`] (30 s).
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.watchdog_timeout = timeout;
        self
    }

    /// How long connecting to Redis may take before it counts as unreachable.
    ///
    /// Default: [`DEFAULT_CONNECT_TIMEOUT`] (5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one Redis command may wait for its reply. A command that timed out may still
    /// have run on the server: lockman treats its outcome as unknown.
    ///
    /// Default: [`DEFAULT_RESPONSE_TIMEOUT`] (3 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long lockman's places in a fair lock's queue are kept after their turn came, below
    /// [`fair_lock_place_timeout`](Self::fair_lock_place_timeout), which caps every place
    /// lockman makes (the places are refreshed while their waiters live instead). The same for
    /// every waiter, whatever wait time it gave: a place is its holder's, shared by the clones
    /// of a handle, and must serve the one that waits longest (a waiter that gives up earlier
    /// leaves the queue, and takes off the deadlines behind what its place added).
    ///
    /// At least [`MIN_FAIR_LOCK_PLACE_TIMEOUT`] (100 ms): a place is refreshed every third of
    /// its wait.
    ///
    /// Default: [`DEFAULT_FAIR_LOCK_WAIT_TIMEOUT`] (300 s, Redisson's, so the place timeout
    /// decides).
    pub fn fair_lock_wait_timeout(mut self, timeout: Duration) -> Self {
        self.fair_lock_wait_timeout = timeout;
        self
    }

    /// The longest wait `K` lockman gives its own places in a fair lock's queue: a place is
    /// kept `min(fair_lock_wait_timeout, K)` after its turn came (whatever wait time its caller
    /// gave), and each lock actor with queued waiters refreshes all its places every third of
    /// that in one script (protocol.md, "Places kept alive"). A live waiter
    /// keeps its place however long it waits; a place whose process died (killed, or a manager
    /// dropped without [`shutdown`](crate::LockManager::shutdown)) or whose leave was lost in a
    /// failover stops walling the queue within about `2K`, whatever the caller's wait. Longer
    /// than a Redis outage a waiter should keep its place through (a place that expires
    /// meanwhile queues again at the tail); much longer only delays the queue behind dead
    /// places.
    ///
    /// At least [`MIN_FAIR_LOCK_PLACE_TIMEOUT`] (100 ms), as is `fair_lock_wait_timeout`; keep
    /// both well above the round trip to Redis (a refresh later than two thirds of a place's wait
    /// loses the place, and its waiter queues again at the tail).
    ///
    /// Places are dated and judged by the Redis server's clock, not lockman's clients': their
    /// clocks need not agree with each other. A Redisson client sends its own clock, so its skew
    /// against the server's moves the places it makes and the ones it prunes (one more than
    /// about `2K` ahead prunes live lockman places at the head): keep such clients' clocks well
    /// within `K` of the server's (protocol.md, "Fair lock", "Now, and clock skew").
    ///
    /// Default: [`DEFAULT_FAIR_LOCK_PLACE_TIMEOUT`] (5 s).
    pub fn fair_lock_place_timeout(mut self, timeout: Duration) -> Self {
        self.fair_lock_place_timeout = timeout;
        self
    }

    /// See [`Config::fair_lock_place_timeout`](Self::fair_lock_place_timeout()).
    pub fn get_fair_lock_place_timeout(&self) -> Duration {
        self.fair_lock_place_timeout
    }

    /// See [`Config::fair_lock_wait_timeout`](Self::fair_lock_wait_timeout()).
    pub fn get_fair_lock_wait_timeout(&self) -> Duration {
        self.fair_lock_wait_timeout
    }

    /// How long the actor of a name stays after the name fell idle here (no hold, no waiter,
    /// nothing under way), so that a name used again soon (a request handler's lock, taken once
    /// per request) finds its actor instead of starting a new one: starting one costs about a
    /// third of an uncontended acquire+release (BENCHMARKS.md). An idle actor leaves between
    /// one and two lingers after its last use. `Duration::ZERO` stops it at once.
    ///
    /// Default: [`DEFAULT_IDLE_LINGER`] (1 s).
    pub fn idle_linger(mut self, linger: Duration) -> Self {
        self.idle_linger = linger;
        self
    }

    /// See [`Config::idle_linger`](Self::idle_linger()).
    pub fn get_idle_linger(&self) -> Duration {
        self.idle_linger
    }

    /// How long Redis may be away during any wait (an `acquire()` without a deadline too, of
    /// every kind) before the wait fails with [`LockError::Unavailable`](crate::LockError::Unavailable):
    /// counted from the later of the wait's start and the first failure since Redis last
    /// answered for its name; a single answer of Redis starts it over. A bounded wait shorter
    /// than it ends at its own deadline (`Unavailable` then too, when Redis is away). See the
    /// crate docs, "When Redis is away".
    ///
    /// The default, 15 s, is below the 30 s that HTTP clients and proxies commonly give a
    /// request, so a caller that waits without a deadline hears of an outage before its own
    /// caller gives up; and above a restart of Redis or a Sentinel failover tuned to a few
    /// seconds, which waits ride out. Lower it where callers must hear sooner; raise it where
    /// failovers take longer (Sentinel's default `down-after-milliseconds` alone is 30 s).
    ///
    /// Default: [`DEFAULT_UNAVAILABLE_AFTER`] (15 s). Must be greater than zero.
    pub fn unavailable_after(mut self, bound: Duration) -> Self {
        self.unavailable_after = bound;
        self
    }

    /// See [`Config::unavailable_after`](Self::unavailable_after()).
    pub fn get_unavailable_after(&self) -> Duration {
        self.unavailable_after
    }

    /// How many idle actors (of locks and synchronizers together) one manager keeps lingering
    /// at most; an actor that falls idle beyond that stops at once. It bounds the memory of a
    /// service that touches many names once each (a few hundred bytes to a few KiB an actor).
    ///
    /// Default: [`DEFAULT_MAX_LINGERING`] (10,000).
    pub fn max_lingering(mut self, actors: usize) -> Self {
        self.max_lingering = actors;
        self
    }

    /// See [`Config::max_lingering`](Self::max_lingering()).
    pub fn get_max_lingering(&self) -> usize {
        self.max_lingering
    }

    /// How many threads run the lock actors when lockman runs its own actix System (a manager
    /// started outside one, from plain tokio): names are spread over them by hash, each thread
    /// with its own command connection, so that one busy thread does not serve every name.
    /// Inside an actix System (actix-web, `#[actix_rt::main]`) the actors run on the caller's
    /// arbiter and this is not used. At least 1.
    ///
    /// Default: the number of cores ([`std::thread::available_parallelism`]).
    pub fn arbiters(mut self, threads: usize) -> Self {
        self.arbiters = Some(threads);
        self
    }

    /// See [`Config::arbiters`](Self::arbiters()): the number set, or the number of cores.
    pub fn get_arbiters(&self) -> usize {
        self.arbiters.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        })
    }

    /// The service name this manager gives in its client record (docs/protocol.md, "Client
    /// records"), which `lockman inspect`, `lockman ls` and `lockman top` show beside its holds
    /// and waits.
    ///
    /// Default: the name of the running executable.
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.client_name = Some(name.into());
        self
    }

    /// See [`Config::client_name`](Self::client_name()): the name set, else the executable's
    /// file name, else `"unknown"`.
    pub fn get_client_name(&self) -> String {
        self.client_name.clone().unwrap_or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "unknown".into())
        })
    }

    /// How many lock names get metric series of their own (`lockman_contended_wait_seconds_total`
    /// by `name`): each watchdog tick, the `k` names whose waiters waited longest since the last
    /// tick, so that the number of names a recorder sees stays bounded however many names are
    /// contended. 0 turns the per-name series off.
    ///
    /// Default: [`DEFAULT_CONTENTION_TOP_K`] (20).
    pub fn contention_top_k(mut self, k: usize) -> Self {
        self.contention_top_k = k;
        self
    }

    /// See [`Config::contention_top_k`](Self::contention_top_k()).
    pub fn get_contention_top_k(&self) -> usize {
        self.contention_top_k
    }

    /// Whether a hold's loss is known at once: every lock hold the watchdog renews is also
    /// watched through Redis's client-side tracking (a connection of its own, `CLIENT TRACKING
    /// ON`, RESP3), so a foreign `DEL`, a force unlock, an eviction or an expiry of its key is
    /// reported through the guard within a round trip or two, not at the next renewal. It costs
    /// one connection per manager and one read-only script call per hold handed to the watchdog,
    /// per renewal batch and per invalidation (docs/protocol.md, "Watched holds"); on a cluster,
    /// one connection per master (tracking is per node). Not for permits; a server or ACL user
    /// that refuses `CLIENT TRACKING` turns it off with a warning.
    ///
    /// Default: on.
    pub fn watch_holds(mut self, on: bool) -> Self {
        self.watch_holds = on;
        self
    }

    /// See [`Config::watch_holds`](Self::watch_holds()).
    pub fn get_watch_holds(&self) -> bool {
        self.watch_holds
    }

    /// A lock-delay, as Chubby and Consul have: when a reentrant lock's hold ends **without a
    /// release** (its key expired, was deleted or force-unlocked, or evicted), this manager's
    /// acquires do not take the name until `delay` has passed since the hold's expiry as last
    /// set (its grant's or last renewal's TTL), so that a stale holder's writes in flight drain
    /// before the next holder starts. A release ends it at once. lockman's own addition to the
    /// layout (docs/protocol.md, "Lock-delay"): a delay key beside the lock hash, set at grant
    /// and renewal, deleted by release; every lockman client on the name should use the same
    /// delay, and Redisson clients do not see it (they take the name as soon as the hash is
    /// gone). Reentrant locks ([`LockManager::lock`](crate::LockManager::lock)) only.
    ///
    /// Default: none ([`Duration::ZERO`]).
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// See [`Config::lock_delay`](Self::lock_delay()).
    pub fn get_lock_delay(&self) -> Duration {
        self.lock_delay
    }

    /// Prefixes every lock and synchronizer name, as Redisson's `PrefixNameMapper` (4.8) does
    /// when set as its `nameMapper`: a name is used as `prefix + name`, unless it already starts
    /// with the prefix, which is then used as it is. The mapped name is what every key, channel
    /// and hash tag is built from, exactly as Redisson builds them (so `app1:` and the lock
    /// `orders` give the hash `app1:orders` and the channel `redisson_lock__channel:{app1:orders}`;
    /// a fair lock's queue is `redisson_lock_queue:{app1:orders}`, as Redisson 3.52+ names it).
    /// Handles' `name()` and [`describe`](crate::LockManager::describe) give names back without
    /// the prefix. No separator is added: give it in the prefix (`"app1:"`). Use the same prefix
    /// as the Java services' mapper. Default: none.
    pub fn name_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.name_prefix = prefix.into();
        self
    }

    /// `name` as this config's managers use it in Redis: with the
    /// [name prefix](Self::name_prefix()) (unless it starts with it already). For tools that
    /// read a lock's keys or channels themselves (`lockman watch`, with
    /// [`release_channels`](crate::release_channels)).
    pub fn mapped_name(&self, name: &str) -> String {
        map_name(&self.name_prefix, name.to_owned())
    }

    /// See [`Config::name_prefix`](Self::name_prefix()): the prefix, empty when none.
    pub fn get_name_prefix(&self) -> &str {
        &self.name_prefix
    }

    /// See [`Config::sync_replicas`](Self::sync_replicas()): the count and the timeout.
    pub fn get_sync_replicas(&self) -> Option<(u32, Duration)> {
        self.sync_replicas
    }

    /// How long a bounded wait's last try may take past the wait's deadline before Redis counts
    /// as not answering: [`LAST_TRY_GRACE`], plus the sync timeout with
    /// [`Config::sync_replicas`] (every try then waits for the replicas: a slow acknowledgement
    /// within that timeout is no outage). Every wait bounded past its deadline takes its grace
    /// from here: a lock's last try, a synchronizer's last attempt, a MultiLock's or RedLock's
    /// wait, an HTTP layer's permit.
    pub(crate) fn last_try_grace(&self) -> Duration {
        LAST_TRY_GRACE
            + self
                .sync_replicas
                .map_or(Duration::ZERO, |(_, timeout)| timeout)
    }

    /// See [`Config::refuse_evicting_server`](Self::refuse_evicting_server()).
    pub fn get_refuse_evicting_server(&self) -> bool {
        self.refuse_evicting_server
    }

    /// See [`Config::deadlocks`](Self::deadlocks()).
    pub fn get_deadlocks(&self) -> Deadlocks {
        self.deadlocks
    }

    /// See [`Config::watchdog_timeout`](Self::watchdog_timeout()).
    pub fn get_watchdog_timeout(&self) -> Duration {
        self.watchdog_timeout
    }

    /// See [`Config::connect_timeout`](Self::connect_timeout()).
    pub fn get_connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// See [`Config::response_timeout`](Self::response_timeout()).
    pub fn get_response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// How often the watchdog renews: a third of the watchdog timeout.
    pub(crate) fn renewal_interval(&self) -> Duration {
        self.watchdog_timeout / 3
    }
}

#[cfg(test)]
mod tests;

/// `name` as Redisson's `PrefixNameMapper.map` gives it (Redisson 4.8): `prefix + name`, unless
/// the name already starts with the prefix (then as it is). Every key and channel is built from
/// the result (`protocol::keys`). An empty prefix maps nothing.
pub(crate) fn map_name(prefix: &str, name: String) -> String {
    if name.starts_with(prefix) {
        name
    } else {
        let mut mapped = String::with_capacity(prefix.len() + name.len());
        mapped.push_str(prefix);
        mapped.push_str(&name);
        mapped
    }
}

/// A mapped name back to the name given, as `PrefixNameMapper.unmap`: without the prefix when
/// it starts with it, else as it is.
pub(crate) fn unmap_name<'a>(prefix: &str, name: &'a str) -> &'a str {
    name.strip_prefix(prefix).unwrap_or(name)
}
