//! The name's link to Redis, as a room of the state ([`Link`]), as a lock's is
//! (`lock_state/link.rs`): its one channel's subscription and what it has heard of Redis (an
//! outage, shared with a lock's: [`Outage`]). The rules that read the link with the waiters are
//! `outage.rs` and the state's arrivals and messages (`mod.rs`).

use std::time::Instant;

use crate::actors::name::outage::Outage;
use crate::error::LockError;

/// Where the subscription of the name's channel is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
enum Subscription {
    #[default]
    None,
    Asked,
    Ready,
}

/// What the name knows of its link to Redis. Its invariants: the channel is subscribed only
/// while asked for and not dropped, and an outage is known only until the next answer.
#[derive(Debug, Default)]
pub(super) struct Link {
    subscription: Subscription,
    /// Redis not answering this name, until it answers.
    outage: Outage,
}

impl Link {
    // ----- the subscription ---------------------------------------------------------------

    /// Whether the channel is subscribed, or asked to be.
    pub(super) fn has_subscription(&self) -> bool {
        self.subscription != Subscription::None
    }

    /// A waiter parks: whether the channel is to be subscribed (it was not, nor asked to be).
    pub(super) fn subscribe(&mut self) -> bool {
        let ask = self.subscription == Subscription::None;
        if ask {
            self.subscription = Subscription::Asked;
        }
        ask
    }

    /// The subscription asked for is in place (`ok`) or failed: `Some(ok)` when one was asked
    /// for (none was, or it was dropped since: `None`).
    pub(super) fn subscribed(&mut self, ok: bool) -> Option<bool> {
        if self.subscription != Subscription::Asked {
            return None;
        }
        self.subscription = if ok {
            Subscription::Ready
        } else {
            Subscription::None
        };
        Some(ok)
    }

    /// Drops the subscription: whether there was one (the channel is then to be unsubscribed).
    pub(super) fn unsubscribe(&mut self) -> bool {
        std::mem::take(&mut self.subscription) != Subscription::None
    }

    // ----- Redis away ---------------------------------------------------------------------

    /// Redis did not answer (or refused for a passing state) with `cause`, since `since`:
    /// whether an outage began with it.
    pub(super) fn away(&mut self, cause: LockError, since: Instant) -> bool {
        self.outage.away(cause, since)
    }

    /// Redis answered: whether an outage ended with it.
    pub(super) fn back(&mut self) -> bool {
        self.outage.back()
    }

    /// Whether Redis is away, since when and why.
    pub(super) fn outage(&self) -> &Outage {
        &self.outage
    }
}
