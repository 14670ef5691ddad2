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
//! runs them on an actix System of its own, on a background thread. Either way every acquire and
//! release is a message to the lock actor of its name, which runs the script (from plain tokio, a
//! hop to lockman's thread and back).
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
//! | piece | what it owns |
//! |---|---|
//! | [`LockManager`], [`Lock`], [`LockGuard`] (`manager`, `lock`) | nothing but addresses: thin handles that send messages |
//! | [`FairLock`], [`ReadWriteLock`], [`FencedLock`] (`lock/*`) | the other kinds: `Lock` with another [`LockKind`] |
//! | [`Semaphore`], [`PermitSemaphore`], [`CountDownLatch`], [`PermitGuard`] (`sync`) | the synchronizers' handles: messages to a [`SyncActor`] |
//! | [`Acquire`], [`Release`], [`Grant`] (`actors::messages`, `actors::grant`) | the public messages and the hold they grant; actix users may send them to a [`LockActor`] |
//! | `Registry` (`actors::registry`) | lock name → its lock actor, started on demand |
//! | [`LockActor`] (`actors::lock_actor`) | one per name in use: the shell that runs its `LockState`'s effects; every acquire and release of the name goes through it; stops when idle |
//! | `LockState` (`actors::lock_state`) | the rules of one name, pure: waiters, holds, hand-offs, retries, requests of unknown outcome resent; events in, effects out |
//! | [`SyncActor`] (`actors::sync_actor`) | one per semaphore, permit semaphore or latch name in use: its waiters, subscription and permits; stops when idle |
//! | `SyncState` (`actors::sync_state`) | the waiting rules of one synchronizer, pure |
//! | `Crowd` (`actors::crowd`) | one future watching every waiter's caller and deadline, for both actor kinds |
//! | `PubSubActor` (`actors::pubsub`) | the pub/sub connection; routes unlock and permit messages; supervised |
//! | `Watchdog` (`actors::watchdog`) | batched renewal of every held lock and permit without a lease; supervised |
//! | `FailoverWatch` (`actors::failover`) | with Sentinel: follows the primary, moves the others; supervised |
//! | `scripts` (`*.lua`, `scripts::commands`, `scripts::kind`, `scripts::sync`) | the protocol: one Lua script per operation, by EVALSHA |
//! | `scripts::conn` | the command connections; replica sync; the start-time ACL check |
//! | `connect`, `cluster` | where Redis is (URL, TLS, Sentinel, Cluster); typed connection failures; redaction |
//! | `subscription` | the pub/sub connection of one server or a cluster (SUBSCRIBE or SSUBSCRIBE) |
//! | `keys` | the names of keys and channels (Redisson's layout, `docs/protocol.md`) |
//! | [`MultiLock`], [`RedLock`] (`compose`) | all, or a majority, of several `Lock`s on several servers |
//! | `metrics` | the `metrics` feature: what the actors report, through the `metrics` facade |
//! | `web` (`actix-web` feature) | a lock per HTTP request: an extractor over the handles |
//! | `src/bin/lockman` (`cli` feature) | the `lockman` command, over the public API only |
//!
//! Dependencies point one way: handles (`manager`, `lock`, `sync`, `compose`) → `actors` → protocol
//! (`scripts`, `keys`) → connections (`connect`, `cluster`, `subscription`) → redis. Nothing under
//! `actors` knows the handles: a lock actor replies a [`Grant`], which the handle wraps into a
//! [`LockGuard`], and the guard's release is a [`Release`] to that same actor. Handles share
//! nothing with the actors but messages and the lost signal a grant carries.
//!
//! A request whose reply never came (a time-out, a reset connection, a caller gone mid-trip) is
//! resent with the same request id: every lock script records its outcome under that id for a
//! while and answers a resend with it, so a retry never counts a hold twice and never releases
//! someone else's (`docs/protocol.md`, "Request latches").
//!
//! [actix]: https://docs.rs/actix
//! [Redisson]: https://redisson.org

#![forbid(unsafe_code)]
#![warn(missing_docs, clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod actors;
mod cluster;
mod compose;
mod config;
mod connect;
mod error;
mod keys;
mod lock;
mod manager;
mod metrics;
mod reach;
mod runtime;
mod scripts;
mod subscription;
mod sync;
mod trace;
#[cfg(feature = "actix-web")]
pub mod web;

pub use actors::messages::{
    Acquire, AcquirePermits, Adjust, Adjustment, AwaitLatch, Release, ReleasePermits, Wait,
};
pub use actors::{
    AcquireReply, Grant, LockActor, MAX_HAND_OFF_STREAK, Permits, ReleaseReply, SyncActor,
    SyncDone, SyncReply,
};
pub use compose::{
    CompositeGuard, DEFAULT_MEMBER_TIMEOUT, MultiLock, MultiLockGuard, RedLock, RedLockGuard,
};

pub use config::{
    Config, DEFAULT_CONNECT_TIMEOUT, DEFAULT_FAIR_LOCK_WAIT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT,
    DEFAULT_WATCHDOG_TIMEOUT, MIN_WATCHDOG_TIMEOUT, ShardedSubscription,
};
pub use error::{LockError, TlsFailure};
pub use keys::release_channels;
pub use lock::{
    FairLock, FencedGuard, FencedLock, Holding, Lock, LockGuard, LockInfo, LockShape, QueuedWaiter,
    ReadLock, ReadWriteLock, WriteLock,
};
pub use manager::LockManager;
pub use scripts::{LockKind, SyncKind};
pub use sync::{CountDownLatch, HeldPermit, PermitGuard, PermitSemaphore, Semaphore, SyncInfo};
