//! [`Effect`]: what a per-name state asks its shell to do, the same for both families. Each
//! family fills in what is its own through [`Family`]: the round trip it runs, how a waiter is
//! answered, what identifies a hold for renewal, and what a release (or an
//! adjustment) answers. The shell (`actors::shell`) carries out every variant but
//! [`Effect::Run`] and [`Effect::Answer`] once for both families.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Loss, WaiterId};
use crate::error::LockError;

/// The number of a caller waiting for a release's (or a synchronizer adjustment's) reply,
/// chosen by the shell.
pub(crate) type ReplyId = u64;

/// What differs between the lock family and the synchronizer family, as types.
pub(crate) trait Family {
    /// One Redis round trip of the name.
    type Op: Debug;
    /// How a waiter's request ended.
    type Answer: Debug;
    /// What the Watchdog renews a hold by, besides its epoch.
    type Hold: Debug;
    /// What a release's (or an adjustment's) caller is told when it went well.
    type Done: Debug;
}

/// One effect, carried out by the shell in the order given.
#[derive(Debug)]
pub(crate) enum Effect<F: Family> {
    /// Make this round trip to Redis and report its outcome with the state's `ran`. Round trips
    /// of one name never interleave, or carry what makes them safe to (a synchronizer's
    /// request latch).
    Run(F::Op),
    /// Answer waiter `id`'s caller; the waiter is gone from the state.
    Answer(WaiterId, F::Answer),
    /// Watch waiter `id`'s caller from now on, and report its going away with the state's
    /// `caller_gone`. Once per waiter, when it is first left waiting: a request whose first
    /// attempt is under way is not watched yet (a grant that reaches nobody comes back and is
    /// released), so an uncontended request costs no watch. A watched waiter is one that
    /// waits: the shell puts it on the manager's board (client records, `lockman top`).
    Watch(WaiterId),
    /// Tell the sender of release (or adjustment) request `id` how it went.
    Done(ReplyId, Result<F::Done, LockError>),
    /// Route this channel here and subscribe it; report with the state's `subscribed`.
    Subscribe(Arc<str>),
    /// No waiter needs this channel any more.
    Unsubscribe(Arc<str>),
    /// Arm waiter `id`'s deadline to pass after this long (replacing the one armed, if any);
    /// report with the state's `deadline`. The waiters' deadlines are served with their
    /// callers' watches by one future per actor (`shell::crowd`); every other timer of a state
    /// is in its own table, on the shell's one timer for it (`NameState::next_timeout`).
    Arm(WaiterId, Duration),
    /// Disarm waiter `id`'s deadline (nothing when it is not armed).
    Cancel(WaiterId),
    /// Hand this hold to the Watchdog for renewal. `confirmed`: when Redis last set its PTTL.
    Track {
        hold: F::Hold,
        epoch: u64,
        confirmed: Instant,
    },
    /// The Watchdog stops renewing this hold.
    Untrack { hold: F::Hold, epoch: u64 },
    /// The hold of this epoch is gone from Redis: tell its guards.
    Lost(u64, Loss),
    /// The hold of this epoch ended (released, or being given back): forget its signal.
    Ended(u64),
    /// The first hold, waiter or round trip arrived: stay alive.
    Busy,
    /// No hold, no waiter and no round trip left: the actor may stop, after lingering a while
    /// in case the name is used again.
    Idle,
    /// A requested stop has done its last round trip: every signal left is lost, and the actor
    /// stops.
    Stopped,
}
