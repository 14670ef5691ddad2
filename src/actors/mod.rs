//! The actor system of one [`LockManager`](crate::LockManager):
//!
//! - [`Registry`]: name → its [`LockActor`] or [`SyncActor`], started on demand;
//! - [`LockActor`]: one per busy name, the shell of its `LockState` (`lock_state`: the rules of
//!   one name, pure); stops itself when it has been idle a while (`shell::linger`);
//! - [`SyncActor`]: one per busy synchronizer name, the same way the shell of its `SyncState`
//!   (`sync_state`); both families are made of the parts in `name`;
//! - [`PubSubActor`]: the pub/sub connection, routing each channel's messages (supervised);
//! - [`Watchdog`]: batched renewal of holds taken without a lease, the watch on them (the
//!   tracking connection), the client record and the contention series (supervised);
//! - `deadlock`: the waits-for graph of the manager's lock waits (pure, `deadlock/graph.rs`),
//!   the detector that carries out its verdicts, each lock actor's seat in it, and the probe
//!   that follows waits through other processes (supervised);
//! - `lost`: the lost signal and validity a grant carries (the ground floor, no actix);
//! - `FailoverWatch`: with Sentinel, follows the primary and moves the others with it
//!   (supervised).
//!
//! [`messages`] lists everything they say to each other.

pub(crate) mod board;
pub(crate) mod deadlock;
pub(crate) mod failover;
pub(crate) mod lock_actor;
pub(crate) mod lock_state;
pub(crate) mod lost;
pub(crate) mod messages;
pub(crate) mod name;
pub(crate) mod pubsub;
pub(crate) mod registry;
pub(crate) mod services;
pub(crate) mod shell;
pub(crate) mod sync_actor;
pub(crate) mod sync_state;
pub(crate) mod system;
pub(crate) mod watchdog;

pub use lock_actor::{Acquire, AcquireReply, Grant, LockActor, Release, ReleaseReply};
pub use name::MAX_HAND_OFF_STREAK;
pub use sync_actor::{AcquirePermits, Permits, ReleasePermits, SyncActor, SyncDone, SyncReply};
