//! The state's own timers, the ones no waiter, hold or round trip owns (a deadline, a lease's
//! end and a resend end with their owner): the retry timer, one for every parked waiter due a
//! retry, and the outage's bound ([`Timer::Unavailable`]). Each is kept as the instant it fires,
//! so that arming it for later than it fires already changes nothing; the shell gets an
//! [`Effect::Arm`] or [`Effect::Cancel`] for each change.

use std::time::{Duration, Instant};

use super::{Effect, Timer};

/// When [`Timer::Retry`] and [`Timer::Unavailable`] fire, if armed.
#[derive(Debug, Default)]
pub(super) struct Timers {
    retry: Option<Instant>,
    unavailable: Option<Instant>,
}

impl Timers {
    /// Arms the retry timer for `at`, unless it fires sooner already.
    pub(super) fn retry_at(&mut self, at: Instant, now: Instant, out: &mut Vec<Effect>) {
        if self.retry.is_none_or(|armed| at < armed) {
            self.retry = Some(at);
            out.push(Effect::Arm(Timer::Retry, at.saturating_duration_since(now)));
        }
    }

    pub(super) fn retry_armed(&self) -> bool {
        self.retry.is_some()
    }

    /// The retry timer fired at `now`: whether it is due (armed for no later than `now`); it is
    /// then armed no more.
    pub(super) fn retry_fired(&mut self, now: Instant) -> bool {
        if self.retry.is_some_and(|at| at > now) {
            return false;
        }
        self.retry = None;
        true
    }

    /// Arms [`Timer::Unavailable`] to fire `after` from `now`, unless it fires as soon or
    /// sooner already.
    pub(super) fn unavailable_in(&mut self, after: Duration, now: Instant, out: &mut Vec<Effect>) {
        if self.unavailable.is_none_or(|at| now + after < at) {
            self.unavailable = Some(now + after);
            out.push(Effect::Arm(Timer::Unavailable, after));
        }
    }

    /// [`Timer::Unavailable`] fired: it is armed no more.
    pub(super) fn unavailable_fired(&mut self) {
        self.unavailable = None;
    }

    /// Disarms [`Timer::Unavailable`] if armed.
    pub(super) fn stop_unavailable(&mut self, out: &mut Vec<Effect>) {
        if self.unavailable.take().is_some() {
            out.push(Effect::Cancel(Timer::Unavailable));
        }
    }

    /// Disarms the retry timer if armed.
    pub(super) fn stop_retry(&mut self, out: &mut Vec<Effect>) {
        if self.retry.take().is_some() {
            out.push(Effect::Cancel(Timer::Retry));
        }
    }
}
