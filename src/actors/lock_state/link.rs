//! The name's link to Redis, as a room of the state ([`Link`]): what it has heard of Redis (an
//! outage, the last answer), the waiters at their last try until the next answer decides, the
//! attempts' failures in a row (their backoff), and the channels routed here. The rules that
//! read the link with the waiters and round trips are `outage.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashSet;

use super::WaiterId;
use crate::actors::name::outage::Outage;
use crate::error::LockError;

/// A waiter at its last try: since when, and when its verdict is due.
#[derive(Debug)]
pub(super) struct LastTry {
    pub id: WaiterId,
    pub began: Instant,
    pub due: Instant,
}

/// What the name knows of its link to Redis. Its invariant: an outage is known only until the
/// next answer ([`back`](Self::back)), and a last try only until its verdict is taken out.
#[derive(Debug, Default)]
pub(super) struct Link {
    /// The channels routed here: while a waiter needs them, and the one [`kept`](Self::keep).
    subscribed: FxHashSet<Arc<str>>,
    /// A channel kept routed here with no waiter needing it (`keep`), until a waiter leaves
    /// without the lock or the actor departs.
    kept: Option<Arc<str>>,
    /// Consecutive retryable errors of attempts, for the backoff; reset by any answer from
    /// Redis to an attempt.
    failures: u32,
    /// Redis not answering this name, until it answers.
    outage: Outage,
    /// When Redis last answered this name.
    heard_at: Option<Instant>,
    /// Waiters at their last try (`outage::deadline`), until Redis's next answer decides.
    last_tries: Vec<LastTry>,
}

impl Link {
    // ----- subscriptions ------------------------------------------------------------------

    /// Routes `channel` here; whether it was not yet (it is then to be subscribed).
    pub(super) fn subscribe(&mut self, channel: Arc<str>) -> bool {
        self.subscribed.insert(channel)
    }

    pub(super) fn is_subscribed(&self, channel: &str) -> bool {
        self.subscribed.contains(channel)
    }

    /// Whether any channel is routed here.
    pub(super) fn has_subscriptions(&self) -> bool {
        !self.subscribed.is_empty()
    }

    /// The channels routed here.
    #[cfg(test)]
    pub(super) fn subscriptions(&self) -> impl Iterator<Item = &Arc<str>> {
        self.subscribed.iter()
    }

    /// Stops routing `channel` here; whether it was (it is then to be unsubscribed).
    pub(super) fn unsubscribe(&mut self, channel: &str) -> bool {
        if self.kept.as_deref() == Some(channel) {
            self.kept = None;
        }
        self.subscribed.remove(channel)
    }

    /// Stops routing every channel here: the channels to unsubscribe.
    pub(super) fn unsubscribe_all(&mut self) -> impl Iterator<Item = Arc<str>> + use<> {
        self.kept = None;
        std::mem::take(&mut self.subscribed).into_iter()
    }

    /// Keeps `channel` routed here (when it is) though no waiter needs it now: the next wait
    /// then needs no subscription of its own.
    pub(super) fn keep(&mut self, channel: Arc<str>) {
        if self.subscribed.contains(&channel) {
            self.kept = Some(channel);
        }
    }

    /// The channel kept routed here with no waiter, if any.
    #[cfg(test)]
    pub(super) fn kept(&self) -> Option<&Arc<str>> {
        self.kept.as_ref()
    }

    /// Stops routing every channel but the kept one: the channels to unsubscribe.
    pub(super) fn unsubscribe_unkept(&mut self) -> Vec<Arc<str>> {
        if self.subscribed.is_empty() {
            // An uncontended name's every fall idle: nothing to compare, nothing to allocate.
            return Vec::new();
        }
        let kept = self.kept.clone();
        let gone: Vec<Arc<str>> = (self.subscribed.iter())
            .filter(|c| Some(*c) != kept.as_ref())
            .cloned()
            .collect();
        for channel in &gone {
            self.subscribed.remove(channel);
        }
        gone
    }

    // ----- attempts' failures -------------------------------------------------------------

    /// An attempt failed with a retryable error: the failures in a row, this one counted (the
    /// backoff's step).
    pub(super) fn attempt_failed(&mut self) -> u32 {
        self.failures = self.failures.saturating_add(1);
        self.failures
    }

    /// Redis answered an attempt: the backoff of failed attempts starts over.
    pub(super) fn attempt_answered(&mut self) {
        self.failures = 0;
    }

    // ----- Redis away ---------------------------------------------------------------------

    /// Redis did not answer (or refused for a passing state) with `cause`, since `since`:
    /// whether an outage began with it (one under way takes the newer cause).
    pub(super) fn away(&mut self, cause: LockError, since: Instant) -> bool {
        self.outage.away(cause, since)
    }

    /// Redis answered at `now`: whether an outage ended with it.
    pub(super) fn back(&mut self, now: Instant) -> bool {
        self.heard_at = Some(now);
        self.outage.back()
    }

    /// Whether Redis is away, since when and why.
    pub(super) fn outage(&self) -> &Outage {
        &self.outage
    }

    /// Whether Redis answered within `grace` before `now`.
    pub(super) fn heard_within(&self, grace: Duration, now: Instant) -> bool {
        (self.heard_at).is_some_and(|at| now.saturating_duration_since(at) < grace)
    }

    /// Whether Redis answered at `at` or since.
    pub(super) fn heard_since(&self, at: Instant) -> bool {
        self.heard_at.is_some_and(|heard| heard >= at)
    }

    // ----- last tries ---------------------------------------------------------------------

    /// A waiter is at its last try.
    pub(super) fn last_try(&mut self, last: LastTry) {
        self.last_tries.push(last);
    }

    /// Whether a waiter is at its last try.
    pub(super) fn awaits_verdicts(&self) -> bool {
        !self.last_tries.is_empty()
    }

    /// When the first last try's verdict is due, if any waits for one.
    pub(super) fn next_verdict(&self) -> Option<Instant> {
        self.last_tries.iter().map(|t| t.due).min()
    }

    /// Takes out the last tries whose verdict is due by `now`.
    pub(super) fn verdicts_due(&mut self, now: Instant) -> Vec<LastTry> {
        self.take_last_tries(|t| t.due <= now)
    }

    /// Takes out the last tries `decided` picks (and drops those whose waiter `left`): the
    /// others wait on.
    pub(super) fn decide_last_tries(
        &mut self,
        left: impl Fn(WaiterId) -> bool,
        decided: impl Fn(WaiterId) -> bool,
    ) -> Vec<LastTry> {
        self.last_tries.retain(|t| !left(t.id));
        self.take_last_tries(|t| decided(t.id))
    }

    fn take_last_tries(&mut self, take: impl Fn(&LastTry) -> bool) -> Vec<LastTry> {
        let (taken, kept) = std::mem::take(&mut self.last_tries)
            .into_iter()
            .partition(take);
        self.last_tries = kept;
        taken
    }
}
