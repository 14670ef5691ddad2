//! The state's own timers: the ones no waiter, hold, unresolved request or leave owns (those
//! end with their owner). A table of what is armed, as quinn-proto's `TimerTable`, in place of a
//! flag per timer; the shell still gets an [`Effect::Arm`] or [`Effect::Cancel`] for each change.

use std::time::Duration;

use rustc_hash::FxHashSet;

use super::{Effect, Timer};

/// The timers armed: [`Timer::Retry`], [`Timer::Track`], [`Timer::Refresh`] and
/// [`Timer::Settle`].
#[derive(Debug, Default)]
pub(super) struct Timers {
    armed: FxHashSet<Timer>,
}

impl Timers {
    /// Arms `timer` to fire after `after`, replacing it if armed.
    pub(super) fn set(&mut self, timer: Timer, after: Duration, out: &mut Vec<Effect>) {
        self.armed.insert(timer.clone());
        out.push(Effect::Arm(timer, after));
    }

    /// Disarms `timer` if it is armed.
    pub(super) fn stop(&mut self, timer: &Timer, out: &mut Vec<Effect>) {
        if self.armed.remove(timer) {
            out.push(Effect::Cancel(timer.clone()));
        }
    }

    /// Disarms `timer`, armed or not: for the timer of something that just ended, which may
    /// or may not have armed it (a Cancel of a timer not armed is nothing to the shell).
    pub(super) fn cancel(&mut self, timer: Timer, out: &mut Vec<Effect>) {
        self.armed.remove(&timer);
        out.push(Effect::Cancel(timer));
    }

    /// `timer` fired: it is armed no more.
    pub(super) fn fired(&mut self, timer: &Timer) {
        self.armed.remove(timer);
    }

    pub(super) fn is_armed(&self, timer: &Timer) -> bool {
        self.armed.contains(timer)
    }

    /// Every timer armed.
    #[cfg(test)]
    pub(super) fn iter(&self) -> impl Iterator<Item = &Timer> {
        self.armed.iter()
    }
}
