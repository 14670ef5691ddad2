//! # lockman
//!
//! Distributed locks on Redis for Rust services, built as an [actix] actor system and
//! compatible on the wire with [Redisson]: a Rust service and a Java service can lock the same
//! names, exclude each other and wake each other.
//!
//! A **lock** is a Redis hash named after the lock. Its **holder** field, `<client id>:<n>`, counts
//! how many times that holder took it (**reentrant**); the key's PTTL is the **lease**. A lock taken
//! without a lease is renewed by the **watchdog** every third of the watchdog timeout (30 s by
//! default) for as long as it is held, and expires within that timeout when its process dies. A
//! caller that finds the lock taken **waits** on the lock's unlock channel and retries when the
//! holder releases or its TTL runs out: no polling.
//!
//! ## Quick start
//!
//! ```no_run
//! # async fn demo() -> Result<(), lockman::LockError> {
//! use std::time::Duration;
//! use lockman::LockManager;
//!
//! let manager = LockManager::connect("redis://127.0.0.1:6379/0").await?;
//! let lock = manager.lock("orders:42");
//!
//! let guard = lock.acquire().await?;          // waits; renewed by the watchdog
//! // ... the critical section ...
//! guard.release().await?;
//!
//! if let Some(guard) = lock.try_acquire_for(Duration::from_millis(200)).await? {
//!     assert!(!guard.is_lost());
//! }                                            // dropping a guard releases it
//! manager.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! `LockManager::start` works inside an actix System (actix-web, `#[actix_rt::main]`), where
//! the actors run on the current arbiter, and from a plain `#[tokio::main]` program, where lockman
//! runs them on an actix System of its own, on background threads: lock actors are spread over
//! [`Config::arbiters`] of them by name, each with its own command connection. Either way every
//! acquire and release is a message to the lock actor of its name, which runs the script (from
//! plain tokio, a hop to lockman's thread and back). An actor whose name falls idle lingers a
//! moment ([`Config::idle_linger`]) before it stops, so a name used again soon finds it.
//!
//! ## Deployments
//!
//! A [`Config`] names one server by URL — `redis://`, `rediss://` (TLS, the default `tls`
//! feature), `redis+unix://` — with an ACL user and password in the URL, the primary of a
//! Sentinel deployment ([`Config::sentinel`]), which lockman follows through failovers, or a
//! Redis Cluster ([`Config::cluster`]), with sharded pub/sub as Redisson uses it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), lockman::LockError> {
//! use std::time::Duration;
//! use lockman::{Config, LockManager};
//!
//! let tls = Config::new("rediss://app:s3cret@redis.internal:6380/0")
//!     .tls_ca_pem(std::fs::read("/etc/redis/ca.pem").unwrap_or_default());
//! let manager = LockManager::start(tls).await?;
//!
//! let sentinel = Config::sentinel("mymaster", ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"])
//!     .master_auth(Some("app"), "s3cret")
//!     .sync_replicas(1, Duration::from_millis(500));
//! let manager = LockManager::start(sentinel).await?;
//! # Ok(()) }
//! ```
//!
//! **Replica sync** ([`Config::sync_replicas`]) is the one choice with a real trade-off. Redis
//! replicates asynchronously: a lock granted by a primary that dies a moment later may be missing
//! on the replica that takes over, and a second client can then take it — two holders. lockman
//! reports the first holder's loss through its guard, but only once the watchdog finds the key
//! gone, after the second may already be inside. With replica sync every acquire waits until
//! `count` replicas have it (one replication round trip more per acquire and per renewal),
//! and fails with [`LockError::ReplicaSync`] while fewer replicas are up. Without it, use a
//! [`FencedLock`] wherever a stale holder's write would do harm.
//!
//! ## Architecture
//!
//! The folders are the layers, top to bottom; each imports only from the ones below it
//! (`tests/layers.rs` checks it, and that no module imports one that imports it back):
//!
//! | layer | what is there |
//! |---|---|
//! | `handles/` | what users hold: actor addresses, and the command connections for what needs no actor (reads, `force_unlock`): [`LockManager`] (`manager.rs`) and the state its handles share (`state.rs`); the one place a user's name becomes a key, with the name prefix (`name.rs`); [`Lock`], [`LockGuard`] and the other kinds (`lock/`); [`MultiLock`], [`RedLock`] (`compose/`); [`Semaphore`], [`PermitSemaphore`], [`CountDownLatch`], [`PermitGuard`] (`sync/`); [`Election`] and [`Leadership`] (`election/`); the `scope` of every guard (`scope.rs`); how a handle reaches its name's actor (`reach.rs`); where the actors run (`runtime.rs`); the spans (`trace.rs`); the actix-web extractors ([`web`], `web.rs`) |
//! | `actors/` | one [`LockActor`] per lock name in use (`lock_actor/`, with the [`Grant`] and the public [`Acquire`] and [`Release`] it answers), the shell of a pure `LockState` (`lock_state/`: waiters, holds, hand-offs, requests of unknown outcome resent; events in, effects out); one [`SyncActor`] per synchronizer name (`sync_actor/`, with [`Permits`], [`AcquirePermits`], [`ReleasePermits`]), the shell of a pure `SyncState` (`sync_state/`: waiters, permits held and their leases, give-backs, hand-offs, requests resent); what both families are made of (`name/`: the public [`Wait`], the backoff, the `Crowd` serving waiters, the lost signal, lingering); the `Registry` (name → actor, started on demand); the supervised `PubSubActor` (routes each channel's messages to every actor listening on it: kinds of one name share a channel), `Watchdog` (batched renewal of locks and permits without a lease) and `FailoverWatch` (Sentinel); what they all need (`services.rs`), how they start (`system.rs`), and the messages they exchange, which name no actor type (`messages.rs`) |
//! | `metrics.rs` | the `metrics` feature: what the actors report |
//! | `protocol/` | one Lua script per operation, run by EVALSHA (`*.lua`, `sync/*.lua`), their typed calls (`commands.rs`, `sync.rs`, fenced writes in `fence.rs`), the lock kinds (`kind.rs`), the names of keys and channels (`keys.rs`, Redisson's layout, `docs/protocol.md`), the start-time permission probe (`probe.rs`), the diagnosis of a deployment: its reads and the [`Diagnosis`] judged from them (`diagnose.rs`) |
//! | `connections/` | URLs and TLS (`url.rs`), typed connection failures (`failure.rs`), one server or Sentinel's primary (`endpoint.rs`), a Redis Cluster (`cluster.rs`), the command connections and replica sync (`command.rs`), the pub/sub connection (`subscription.rs`) |
//! | `config/`, `error.rs` | the settings (with the redaction of passwords, `redact.rs`) and the one error type |
//!
//! `src/bin/lockman` (`cli` feature) is the `lockman` command, over the public API only.
//! Nothing under `actors/` knows the handles: a lock actor replies a [`Grant`], which the handle
//! wraps into a [`LockGuard`], and the guard's release is a [`Release`] to that same actor.
//! Handles share with the actors messages, the lost signal a grant carries, and the command
//! connections, on which they run what no actor serves (reads, `force_unlock`).
//!
//! A request whose reply never came (a time-out, a reset connection, a caller gone mid-trip) is
//! resent as it was: every lock script carries the count its holder had before it and
//! recognises, from the count it finds, a request that ran already, answering it as then; so a
//! retry never counts a hold twice and never releases someone else's (`docs/protocol.md`, "Sent
//! again"). Synchronizer scripts record their outcome under a request id instead ("Requests sent
//! again" there).
//!
//! **When Redis fails**, only the pub/sub connection is restarted: the `PubSubActor` runs under an
//! actix `Supervisor`, and when its message stream ends it stops, is restarted, reconnects with
//! backoff, subscribes every routed channel again and tells each actor to retry its waiters (the
//! messages of the gap are gone). A connection can also go silent without ending (a NAT, firewall
//! or load balancer that forgot its flow drops its packets without a reset), so the actor sends
//! it a PING every 3 s and restarts the same way when no answer comes within the response timeout
//! (at least 1 s), or when a SUBSCRIBE or UNSUBSCRIBE is not confirmed within it. The `Watchdog`
//! and `FailoverWatch` are supervised too, but a Redis failure does not stop them: they try again
//! on their schedule. Commands are not restarted but **resent**, as above: the command
//! connections reconnect by themselves when their socket fails, and are replaced (in the
//! background, on their lane's thread) after a command that got no reply within the response
//! timeout, since redis-rs would reuse a silent one for good; each per-name state sends its
//! request again until Redis answers or its horizon passes. Renewal is **one manager-wide
//! `Watchdog`**, not a timer per name: every third of the watchdog timeout it renews every hold
//! taken without a lease in script calls of up to 100 holds each (`RENEW_BATCH`), so 10,000 holds
//! cost 100 calls a tick, not 10,000 timers and calls; a lock hold reaches it only once it has
//! lived a sixth of the timeout.
//!
//! [actix]: https://docs.rs/actix
//! [Redisson]: https://redisson.org

#![forbid(unsafe_code)]
#![warn(missing_docs, clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod actors;
mod config;
mod connections;
mod error;
mod handles;
mod metrics;
mod protocol;

#[cfg(feature = "actix-web")]
pub use handles::web;

pub use actors::messages::{Adjust, Adjustment, AwaitLatch, Wait};
pub use actors::{
    Acquire, AcquirePermits, AcquireReply, Grant, LockActor, MAX_HAND_OFF_STREAK, Permits, Release,
    ReleasePermits, ReleaseReply, SyncActor, SyncDone, SyncReply,
};
pub use handles::clients::{ClientInfo, HeldName, WaitedName};
pub use handles::compose::{
    CompositeGuard, DEFAULT_MEMBER_TIMEOUT, MultiLock, MultiLockGuard, RedLock, RedLockGuard,
};

pub use config::{
    Config, DEFAULT_CONNECT_TIMEOUT, DEFAULT_CONTENTION_TOP_K, DEFAULT_FAIR_LOCK_PLACE_TIMEOUT,
    DEFAULT_FAIR_LOCK_WAIT_TIMEOUT, DEFAULT_IDLE_LINGER, DEFAULT_MAX_LINGERING,
    DEFAULT_RESPONSE_TIMEOUT, DEFAULT_WATCHDOG_TIMEOUT, MIN_FAIR_LOCK_PLACE_TIMEOUT,
    MIN_WATCHDOG_TIMEOUT, ShardedSubscription,
};
pub use error::{LockError, TlsFailure};
pub use handles::election::{DEFAULT_OBSERVE_EVERY, Election, Leader, Leadership, Observer};
pub use handles::lock::{
    FairLock, FencedGuard, FencedLock, Holding, Lock, LockGuard, LockInfo, LockShape, QueuedWaiter,
    ReadLock, ReadWriteLock, WriteLock,
};
pub use handles::manager::LockManager;
pub use handles::sync::{
    CountDownLatch, HeldPermit, PermitGuard, PermitLease, PermitSemaphore, Semaphore, SyncInfo,
};
pub use protocol::keys::release_channels;
pub use protocol::{Check, CheckStatus, Diagnosis, LockKind, SyncKind};
