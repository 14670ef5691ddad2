//! Other processes' turn after a streak of local hand-offs.
//!
//! A release hands the lock to a local waiter at most [`MAX_HAND_OFF_STREAK`] times in a row
//! (`hand_off_to`); the next one goes through Redis and publishes. That message is all a waiter
//! in another process hears, and it must still send its attempt, while this actor's waiters
//! hear the same message and could try at once: the first attempt to reach Redis wins, so a
//! process nearer to Redis (or merely less busy) would win nearly every time and the other
//! could wait for good. So after such a release this actor's waiters hold back a moment (no
//! attempt; the hold-back timer's end gives the head waiter its attempt), long enough for a
//! waiter woken by the message elsewhere to take the lock. Nothing changes on the wire.
//!
//! A spin lock's hold-back is longer by the back-off's longest sleep (another process's spinner
//! hears nothing and tries only after its sleep), which in one busy process cost a third of its
//! acquisitions when no other process waited at all. So a long hold-back that went unused (this
//! actor's head found the lock still free at its end) is followed by short ones (the reentrant
//! lock's) until [`UNUSED_TURN_SPACING`] of its lengths have passed ([`SpinTurns`]); a long one
//! that another process took keeps them long.

use std::time::{Duration, Instant};

use super::*;

/// The shortest hold-back: a waiter in another process needs the message, its own actor's
/// turn, and its attempt's way to Redis; on a LAN that is well under a millisecond of network
/// and the rest is scheduling, so a few milliseconds cover a busy process.
pub(super) const HOLD_BACK_MIN: Duration = Duration::from_millis(5);
/// The longest hold-back, however slow the release's round trip was.
pub(super) const HOLD_BACK_MAX: Duration = Duration::from_millis(100);

/// The hold-back after a release whose round trip took `round_trip`: a client as far from
/// Redis as this one needs about one round trip (the message's half, then its attempt's) beyond
/// its own processing; twice that, within [`HOLD_BACK_MIN`]..=[`HOLD_BACK_MAX`].
pub(super) fn hold_back(round_trip: Duration) -> Duration {
    (round_trip * 2).clamp(HOLD_BACK_MIN, HOLD_BACK_MAX)
}

/// After a spin hold-back that nobody took, the next long one is at least this many of its
/// lengths later: the lock lies free for nobody at most an eighth of a busy process's time, and a
/// spinner of another process that starts waiting meanwhile waits about that much longer (up to
/// about 8 × 133 ms with the default back-off; at most 1.08 s measured, `tests/spin.rs`) unless
/// one of its attempts finds a short hold-back.
pub(super) const UNUSED_TURN_SPACING: u32 = 7;

/// Whether a spin lock's long hold-backs find takers (module doc).
#[derive(Debug, Default)]
pub(super) struct SpinTurns {
    /// A long hold-back ended: the next spin attempt's answer tells whether another process
    /// took the lock meanwhile.
    checking: bool,
    /// The last long hold-back, while it is under way or being checked.
    length: Duration,
    /// A long hold-back went unused: until this instant streaks end with short ones.
    short_until: Option<Instant>,
}

/// The longest sleep of a spin waiter under `backoff`.
fn longest_sleep(backoff: crate::config::SpinBackOff) -> Duration {
    match backoff {
        crate::config::SpinBackOff::Exponential { max, .. } => max,
        crate::config::SpinBackOff::Constant { delay } => delay,
    }
}

impl LockState {
    /// A release of `key` sent at `started` freed the lock in Redis and published: the streak
    /// of hand-offs starts over. When that release ended a full streak (the hand-off it did not
    /// do was refused for the streak's sake, or the last local waiter just left), other
    /// processes' waiters get their turn: this actor's hold back (`holds_back`).
    pub(super) fn streak_over(&mut self, key: &HoldKey, started: Instant) {
        let full = self.waiters.streak_over();
        if full && key.1.is_exclusive_unfair() {
            let round_trip = self.now.saturating_duration_since(started);
            let mut wait = hold_back(round_trip);
            let short = self.spin_turns.short_until.is_some_and(|t| self.now < t);
            if key.1.spins() && !short {
                // No message wakes another process's spin waiter: it tries after its sleep,
                // up to the back-off's longest. Its turn lasts that long more.
                wait += longest_sleep(self.settings.spin_backoff);
                self.spin_turns.length = wait;
            }
            self.timers.set(Timer::Turn, self.now, wait);
        }
    }

    /// Whether waiter `id`'s attempt waits for the end of the hold-back: a waiter that may
    /// wait, of the kind that hands off, whose holder holds nothing here (a re-entry never
    /// waits for others). A single attempt goes now: it cannot wait, and it is not one of the
    /// waiters that would take the lock back every time.
    pub(super) fn holds_back(&self, id: WaiterId) -> bool {
        if !self.timers.is_armed(&Timer::Turn) {
            return false;
        }
        self.waiters.get(id).is_some_and(|w| {
            w.kind.is_exclusive_unfair()
                && w.may_wait()
                && !self.holds.contains(&(w.holder.clone(), w.kind))
        })
    }

    /// The hold-back ended: the head waiter tries (any wake-up held back meanwhile was for
    /// it), and finds the lock taken when another process's waiter took its turn.
    pub(super) fn turn_over(&mut self) {
        let turns = &mut self.spin_turns;
        turns.checking = !turns.length.is_zero() && !self.waiters.is_empty();
        if !turns.checking {
            turns.length = Duration::ZERO;
        }
        self.wake_one();
    }

    /// A spin attempt was answered: the first after a long hold-back tells whether another
    /// process took it (`busy`), so that the next ones stay long, or nobody did, so that short
    /// ones follow for [`UNUSED_TURN_SPACING`] of its lengths.
    pub(super) fn spin_tried(&mut self, busy: bool) {
        let turns = &mut self.spin_turns;
        if !std::mem::take(&mut turns.checking) {
            return;
        }
        let length = std::mem::take(&mut turns.length);
        turns.short_until = (!busy).then(|| self.now + length * UNUSED_TURN_SPACING);
    }
}
