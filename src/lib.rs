//! # lockman
//!
//! **The package is `lockman-redis`; the library it gives is `lockman`** (the crate named
//! `lockman` on crates.io is unrelated):
//!
//! ```toml
//! [dependencies]
//! lockman-redis = "0.1"
//! ```
//!
//! Distributed locks and synchronizers on Redis for Rust services, built as an [actix] actor
//! system and compatible on the wire with [Redisson]: a Rust service and a Java service can lock
//! the same names, exclude each other and wake each other.
//!
//! ## What it offers
//!
//! - **Locks**, every Redisson kind, from a [`LockManager`]: [`Lock`] (reentrant),
//!   [`FairLock`] (first come, first served across processes), [`ReadWriteLock`],
//!   [`FencedLock`] (a token per acquisition that never goes backwards), and non-reentrant locks
//!   ([`LockManager::non_reentrant_lock`]).
//! - **Compositions**: [`MultiLock`] (all or nothing) and [`RedLock`] (a majority of servers).
//! - **Synchronizers**: [`Semaphore`], [`PermitSemaphore`] (permits with a lease, or renewed by
//!   the watchdog) and [`CountDownLatch`].
//! - **Elections**: [`Election`], with fenced terms and fenced writes ([`Leadership`]).
//! - **Guards that tell**: a hold lost is reported (a guard's `lost()` resolves); its
//!   guarantee has an end (`valid_until()`), and [`LockGuard::scope`] stops work before it.
//! - **Deadlocks found, not waited out** ([`deadlock`]): a cycle of waits among a manager's
//!   callers, or through other processes, is found and its youngest wait fails with
//!   [`LockError::Deadlock`], naming the cycle.
//! - **Who holds what**: client records read by [`LockManager::clients`] and by the `lockman`
//!   command (`ls`, `top`, `inspect`; `exec` and `elect` run a command under a lock or a lead).
//! - **Deployments**: TLS, ACL users, Sentinel, Cluster, replica sync; metrics, tracing spans and
//!   actix-web extractors ([`web`]).
//! - **For axum, tonic and tower users**, a lock or a permit per request: `lockman::tower` (`tower`
//!   feature).
//! - **For actix users**, the messages the handles send: [`actix`].
//! - **For testing your own failure paths**, a throwaway server with faults on demand (a hold
//!   lost, Redis frozen, this client cut off, a Sentinel failover): `lockman::testing`
//!   (`testing` feature).
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
//! ## When Redis is away
//!
//! A Redis outage is an error, never contention. A wait ends `Ok(None)` (HTTP 409/429, `lockman`
//! exit 75) only when Redis's last answer was that someone else holds the name (or too few permits
//! are free, or the latch is closed). When the last attempt got no answer, the wait ends in
//! [`LockError::Unavailable`] (`name`, `waited`, `cause`): retryable (`is_retryable()` is
//! true), its text says `redis is unavailable`, and `cause` is the last failure seen.
//!
//! "No answer" is: the connection refused, dropped or silent (a reply that never came within the
//! response timeout), the pub/sub connection lost, or a refusal of a state that passes by itself:
//! `READONLY`, `LOADING`, `MASTERDOWN`, `TRYAGAIN`, `CLUSTERDOWN`, `BUSY`, `NOREPLICAS`, or too few
//! replicas acknowledging (`ReplicaSync`, with `Config::sync_replicas`). A wait retries those with
//! backoff until it ends. `OOM` (`OutOfMemory`) and `NOPERM` (`NoPermission`) need a person: they
//! fail at once, whatever the wait, for every waiter of the name.
//!
//! At its deadline a lock's wait goes by what Redis says then, not by what it said last (a
//! server that froze after answering "busy" is not a holder): the request under way, or one last
//! attempt, decides, and no reply within 250 ms of its sending is `Unavailable` (with
//! `Config::sync_replicas`, 250 ms plus the sync timeout: every attempt waits for the replicas,
//! and a slow acknowledgement within that timeout is no outage). A bounded wait so ends at most
//! that long after its deadline.
//!
//! Every wait ends:
//!
//! - a bounded wait (`try_acquire_for`, `try_campaign_for`, `wait_for`, …) at its deadline;
//! - any wait, bounded or not, once Redis has been away for [`Config::unavailable_after`] of it
//!   (default 15 s; counted from the later of the wait's start and the first unanswered request
//!   since Redis last answered for that name; one answer starts it over).
//!
//! | Way in | Redis stopped or unreachable | Redis frozen (replies never come) | Refusing `NOREPLICAS` (and the other passing refusals) | A real holder |
//! |---|---|---|---|---|
//! | `try_acquire_for` of `Lock`, `FairLock`, `ReadLock`, `WriteLock`, `FencedLock`, non-reentrant locks; `try_acquire_with_lease` | `Err(Unavailable)` at the deadline | `Err(Unavailable)` at the deadline | `Err(Unavailable)` at the deadline, `cause` Redis's refusal | `Ok(None)` at the deadline |
//! | `acquire`, `acquire_with_lease` (every lock kind) | `Err(Unavailable)` after `unavailable_after` | `Err(Unavailable)` after `unavailable_after` (from the first unanswered request) | `Err(Unavailable)` after `unavailable_after` | waits |
//! | `try_acquire` (one attempt, every kind) | Redis's own error (retryable), at once | a retryable time-out after the response timeout | Redis's own error (retryable; `ReplicaSync` with replica sync) | `Ok(None)` |
//! | `Semaphore`, `PermitSemaphore`: `try_acquire_for`, `try_acquire_with_lease` | `Err(Unavailable)` at the deadline | `Err(Unavailable)` at the deadline (its last attempt gets 250 ms more) | `Err(Unavailable)` at the deadline | `Ok(None)` at the deadline |
//! | `Semaphore`, `PermitSemaphore`: `acquire`, `acquire_with_lease` | `Err(Unavailable)` after `unavailable_after` | `Err(Unavailable)` after `unavailable_after` | `Err(Unavailable)` after `unavailable_after` | waits |
//! | `CountDownLatch::wait_for` | `Err(Unavailable)` at the deadline | `Err(Unavailable)` at the deadline | a latch is only read, and reads are answered: `Ok(false)` while closed | `Ok(false)` while closed |
//! | `CountDownLatch::wait` | `Err(Unavailable)` after `unavailable_after` | `Err(Unavailable)` after `unavailable_after` | waits (reads are answered) | waits |
//! | `Election::try_campaign_for` / `campaign` | as a lock's `try_acquire_for` / `acquire` | same | same | `Ok(None)` / waits |
//! | `MultiLock::try_acquire_for` / `acquire` | `Err(Unavailable)` naming a member whose Redis is away, at the deadline (a member that has not answered 250 ms after it is away) / after `unavailable_after` | same | same | `Ok(None)` / waits |
//! | `RedLock::try_acquire_for` / `acquire` | `Err(QuorumNotReached)` (retryable) when too many members fail for a majority, at the deadline / after `unavailable_after`; a majority answering works as usual | same | same | `Ok(None)` / waits |
//! | tower `LockLayer`, `PermitLayer` | `503` with `Retry-After` | `503` with `Retry-After` | `503` with `Retry-After` | `409` / `429` with `Retry-After` |
//! | actix-web `RequestGuard`, `RequestPermit` | `503` with `Retry-After` | `503` with `Retry-After` | `503` with `Retry-After` | `409` / `429` with `Retry-After` |
//! | `lockman exec` (`elect`, `latch wait`: the same error mapping) | exit 69, one line naming the cause (`redis is unavailable: …`) | exit 69 | exit 69 | exit 75, "not acquired within" |
//!
//! Metrics and spans tell the two apart: the `outcome` label of `lockman_acquire_total` and
//! `lockman_sync_wait_total`, and the `outcome` field of the `lockman.acquire` and
//! `lockman.campaign` spans, is `unavailable` for this error, `timed_out` for a holder.
//!
//! `tests/outage.rs` shows each row with the server stopped, frozen and refusing `NOREPLICAS`
//! (`lockman elect` and `latch wait` with the server stopped only), on Redis and Valkey, and
//! the `unavailable` metrics label;
//! docs/outages.md has this table and what the tests cover.
//!
//! ## Layout
//!
//! The folders are the layers, top to bottom; each imports only from the ones below it
//! (`tests/layers.rs` checks it, that no module imports one that imports it back, and that the
//! rules of a name are pure):
//!
//! - `handles/`: what users hold: the [`LockManager`], every kind's handle and guard, where a
//!   name becomes a key (`name.rs`), whom a wait belongs to (`deadlock.rs`), how a handle
//!   reaches its name's actor, spans, [`web`] and `tower`.
//! - `actors/`: one actor per busy name, a lock's or a synchronizer's, and the services they share.
//!   - `lock_state/`, `sync_state/`: the rules of one name, pure (events in, effects out; no
//!     actix, timers or Redis), with their unit, property and seeded simulation tests;
//!   - `name/`: what both states speak, pure: [`Wait`](actix::Wait), the backoff, the effects
//!     both emit, and the events both take (`NameState`);
//!   - `shell/`: what every per-name actor does, once for both families: it owns the state and
//!     drives it; timers, pub/sub, watchdog, lost signals, a grant's receipt, lingering, the
//!     board of waits, reply senders;
//!   - `lock_actor/`, `sync_actor/`: the adapters: requests in, round trips, answers out;
//!   - `deadlock/`: the waits-for graph (pure), its detector, each lock actor's seat in it,
//!     and the probe that follows waits through other processes;
//!   - the `Registry` (name → actor), the supervised `PubSubActor` (each channel's messages to
//!     every actor listening on it), `Watchdog` and `FailoverWatch`, `lost.rs` (a grant's lost
//!     signal), and `messages.rs`.
//! - `metrics.rs`: what the `metrics` feature reports.
//! - `diagnose/`: the diagnosis of a deployment ([`Diagnosis`], `lockman doctor`): the reads,
//!   the scratch locks, and their judgement (pure).
//! - `protocol/`: one Lua script per operation, their typed calls, lock kinds, key and channel
//!   names (Redisson's layout, `docs/protocol.md`), client records, the permission probe.
//! - `connections/`: URLs and TLS, one server, Sentinel's primary or a Cluster, command
//!   connections (resent requests, replica sync), the pub/sub connection.
//! - `config/`, `error.rs`: the settings and the one error type.
//! - `testing/` (`testing` feature, outside the layers: nothing imports it): the kit for
//!   applications' tests, a throwaway server, links that can be cut, and faults on demand.
//!
//! `src/bin/lockman` (`cli` feature) is the `lockman` command, over the public API only.
//! Nothing under `actors/` knows the handles: a lock actor replies a [`Grant`](actix::Grant),
//! which the handle wraps into a [`LockGuard`], and the guard's release is a
//! [`Release`](actix::Release) to that same actor.
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
#![warn(
    missing_docs,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used
)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod actors;
mod config;
mod connections;
mod diagnose;
mod error;
mod handles;
mod metrics;
mod protocol;
#[cfg(feature = "testing")]
pub mod testing;

pub use handles::deadlock;
#[cfg(feature = "tower")]
pub use handles::tower;
#[cfg(feature = "actix-web")]
pub use handles::web;

pub use actors::MAX_HAND_OFF_STREAK;

/// The message API, for actix users: the actor of a name
/// ([`LockManager::lock_actor`](crate::LockManager::lock_actor),
/// [`LockManager::sync_actor`](crate::LockManager::sync_actor)) and the messages the handles send
/// it. Every handle is a thin wrapper over these: an actix user may send them directly (see
/// `examples/messages.rs`), as actix's own `dev` module gathers what most users never name.
pub mod actix {
    pub use crate::actors::messages::{Adjust, Adjustment, AwaitLatch, Wait};
    pub use crate::actors::{
        Acquire, AcquirePermits, AcquireReply, Grant, LockActor, Permits, Release, ReleasePermits,
        ReleaseReply, SyncActor, SyncDone, SyncReply,
    };
}
pub use handles::clients::{ClientInfo, HeldName, RecentDeadlock, WaitedName};
pub use handles::compose::{
    CompositeGuard, DEFAULT_MEMBER_TIMEOUT, MultiLock, MultiLockGuard, RedLock, RedLockGuard,
};

pub use config::{
    Config, DEFAULT_CONNECT_TIMEOUT, DEFAULT_CONTENTION_TOP_K, DEFAULT_FAIR_LOCK_PLACE_TIMEOUT,
    DEFAULT_FAIR_LOCK_WAIT_TIMEOUT, DEFAULT_IDLE_LINGER, DEFAULT_MAX_LINGERING,
    DEFAULT_RESPONSE_TIMEOUT, DEFAULT_UNAVAILABLE_AFTER, DEFAULT_WATCHDOG_TIMEOUT,
    MIN_FAIR_LOCK_PLACE_TIMEOUT, MIN_WATCHDOG_TIMEOUT, ShardedSubscription, SpinBackOff,
    redacted_url,
};
pub use diagnose::{Check, CheckStatus, Diagnosis};
pub use error::{LockError, TlsFailure};
pub use handles::election::{DEFAULT_OBSERVE_EVERY, Election, Leader, Leadership, Observer};
pub use handles::lock::GroupLock;
pub use handles::lock::{
    FairLock, FencedGuard, FencedLock, Holding, Lock, LockGuard, LockInfo, LockShape, QueuedWaiter,
    ReadLock, ReadWriteLock, WriteLock,
};
pub use handles::manager::LockManager;
pub use handles::sync::{
    CountDownLatch, HeldPermit, PermitGuard, PermitLease, PermitSemaphore, Semaphore, SyncInfo,
};
pub use protocol::MAX_GROUP_MEMBERS;
pub use protocol::keys::release_channels;
pub use protocol::{LockKind, SyncKind};

/// The README's rust blocks, compiled by `cargo test --doc` (only then is this item built). The
/// README shows whole functions and programs, with no rustdoc-hidden `# ` lines, so GitHub and
/// the registry show the same code that is compiled here.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// `docs/testing.md`'s examples compile (with the `testing` feature).
#[cfg(all(doctest, feature = "testing"))]
#[doc = include_str!("../docs/testing.md")]
pub struct TestingDoctests;
