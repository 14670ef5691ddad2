//! The requests a caller sends a lock actor: [`Acquire`] and [`Release`], public — the handles
//! send exactly these, and an actix user may send them to a [`LockActor`](super::LockActor)
//! directly (see `examples/messages.rs`).

use std::sync::Arc;
use std::time::Duration;

use actix::Message;

use super::grant::Grant;
use crate::actors::name::Wait;
use crate::error::{LockError, Owner, Site};
use crate::protocol::LockKind;

/// Take the lock for `holder`: the reply is a [`Grant`], or `None` when the wait ran out.
///
/// A lock taken with `lease: None` is renewed by the watchdog while held; one taken with a lease
/// expires by itself after it. Dropping the reply (or the request) never leaks a hold: a grant
/// that reaches nobody releases the lock. So an `Acquire` sent with `do_send` (no reply) may
/// take the lock for a round trip and release it at once: send it with `send`.
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<Option<Grant>, LockError>")]
pub struct Acquire {
    /// The holder, `<client id>:<n>` (see [`Lock::holder_id`](crate::Lock::holder_id)); shared,
    /// so that sending it again and again costs no copy.
    pub holder: Arc<str>,
    /// The lease; `None` for the watchdog.
    pub lease: Option<Duration>,
    /// How long to wait while the lock is busy.
    pub wait: Wait,
    /// Which lock: [`LockKind::Reentrant`], or another kind served by the same actor family
    /// (both sides of a read-write lock go to one actor).
    pub kind: LockKind,
    /// Whom the wait and the hold belong to, for deadlock detection
    /// ([`deadlock::current()`](crate::deadlock::current) in the caller's task); `None` keeps
    /// them out of the waits-for graph.
    pub owner: Option<Owner>,
    /// Where the caller's code asked for it ([`deadlock::site()`](crate::deadlock::site)), for
    /// a deadlock's message; `None`: unknown.
    pub site: Option<Site>,
}

/// Release the hold of one grant. Replies [`LockError::NotHeld`] when the lock was lost meanwhile.
#[derive(Debug, Message)]
#[rtype(result = "Result<(), LockError>")]
pub struct Release(pub Grant);
