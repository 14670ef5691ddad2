//! [`TimerTable`]: a per-name state's timers as instants, after quinn-proto's `TimerTable`. The
//! state sets and stops entries; its shell keeps one timer, for [`TimerTable::next`], and when
//! it fires the state takes every entry due ([`TimerTable::take_due`]) and handles it.

use std::hash::Hash;
use std::mem::{Discriminant, discriminant};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

/// The timers armed, each with the instant it fires at.
#[derive(Debug)]
pub(crate) struct TimerTable<T> {
    /// Each armed timer: when it fires, and the number of its arming (ties fire in the order
    /// they were armed).
    armed: FxHashMap<T, (Instant, u64)>,
    /// The earliest instant in `armed`: kept exact by every change, so that reading it (once
    /// per event, by the shell) costs nothing.
    next: Option<Instant>,
    /// Armings so far.
    armings: u64,
    /// How many timers of each variant are armed (a variant once armed keeps its entry, so
    /// this holds a few at most): stopping a timer of a variant none of which is armed (most
    /// stops of an uncontended pair: a retry, a refresh, an expiry or settling of a hold
    /// without lease) then costs no hash of the timer (a holder's id, for some).
    kinds: Vec<(Discriminant<T>, u32)>,
}

impl<T> Default for TimerTable<T> {
    fn default() -> Self {
        Self {
            armed: FxHashMap::default(),
            next: None,
            armings: 0,
            kinds: Vec::new(),
        }
    }
}

impl<T: Clone + Eq + Hash> TimerTable<T> {
    /// Arms `timer` to fire `after` from `now`, replacing its instant if armed; beyond what a
    /// clock can tell (`Duration::MAX`), it never fires: it is disarmed.
    pub(crate) fn set(&mut self, timer: T, now: Instant, after: Duration) {
        match now.checked_add(after) {
            Some(at) => self.set_at(timer, at),
            None => {
                self.stop(&timer);
            }
        }
    }

    /// Arms `timer` to fire `after` from `now`, unless it is armed to fire as soon or sooner
    /// already (a timer that wakes whoever is due by then serves an earlier need, never a
    /// later one).
    pub(crate) fn set_sooner(&mut self, timer: T, now: Instant, after: Duration) {
        let Some(at) = now.checked_add(after) else {
            return;
        };
        if self.armed.get(&timer).is_none_or(|(armed, _)| at < *armed) {
            self.set_at(timer, at);
        }
    }

    /// Arms `timer` to fire at `at`, replacing its instant if armed.
    fn set_at(&mut self, timer: T, at: Instant) {
        self.armings += 1;
        let kind = discriminant(&timer);
        let was = self.armed.insert(timer, (at, self.armings));
        if was.is_none() {
            match self.kinds.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, armed)) => *armed += 1,
                None => self.kinds.push((kind, 1)),
            }
        }
        match was {
            // The earliest entry moved later: another may be the earliest now.
            Some((was, _)) if Some(was) == self.next && at > was => self.find_next(),
            _ => self.next = Some(self.next.map_or(at, |next| next.min(at))),
        }
    }

    /// Disarms `timer`; whether it was armed. Inline up to the per-variant counts: most stops
    /// (an uncontended pair's retry, unavailability, refresh and settling) find none of the
    /// variant armed and end there, with no call.
    #[inline]
    pub(crate) fn stop(&mut self, timer: &T) -> bool {
        self.is_armed_kind(timer) && self.stop_armed(timer)
    }

    /// [`stop`](Self::stop) once a timer of `timer`'s variant is armed.
    fn stop_armed(&mut self, timer: &T) -> bool {
        let kind = discriminant(timer);
        let Some((_, armed)) = self.kinds.iter_mut().find(|(k, n)| *k == kind && *n > 0) else {
            return false;
        };
        let Some((at, _)) = self.armed.remove(timer) else {
            return false;
        };
        *armed -= 1;
        if Some(at) == self.next {
            self.find_next();
        }
        true
    }

    pub(crate) fn is_armed(&self, timer: &T) -> bool {
        // A variant none of which is armed (most asked of) costs no hash of the timer.
        self.is_armed_kind(timer) && self.armed.contains_key(timer)
    }

    /// Whether a timer of `timer`'s variant is armed: for a variant without data (a lock's
    /// `Track` or `Turn`), whether `timer` is, with no hash of it and no lookup.
    #[inline]
    pub(crate) fn is_armed_kind(&self, timer: &T) -> bool {
        let kind = discriminant(timer);
        self.kinds.iter().any(|(k, n)| *k == kind && *n > 0)
    }

    /// When the earliest timer fires, if any is armed.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.next
    }

    /// A mark of the armings so far: [`take_due`](Self::take_due) with it leaves the timers
    /// armed after it for a later turn, so that handling the due ones ends even when they arm
    /// timers due at once.
    pub(crate) fn mark(&self) -> u64 {
        self.armings
    }

    /// Disarms and returns the earliest timer due at `now` (first armed first among those
    /// due at the same instant) that was armed by `mark`.
    pub(crate) fn take_due(&mut self, now: Instant, mark: u64) -> Option<T> {
        if self.next.is_none_or(|next| next > now) {
            return None;
        }
        let (timer, _) = self
            .armed
            .iter()
            .filter(|(_, (at, arming))| *at <= now && *arming <= mark)
            .min_by_key(|(_, due)| **due)?;
        let timer = timer.clone();
        self.stop(&timer);
        Some(timer)
    }

    /// When `timer` fires, if armed.
    #[cfg(test)]
    pub(crate) fn at(&self, timer: &T) -> Option<Instant> {
        self.armed.get(timer).map(|(at, _)| *at)
    }

    /// Every timer armed.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.armed.keys()
    }

    fn find_next(&mut self) {
        self.next = self.armed.values().map(|(at, _)| *at).min();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// `next` is the earliest entry through sets, moves and stops; due entries come out
    /// earliest first, ties in arming order, and none armed after the mark. (The breaks: a
    /// `next` left at a stopped or moved entry; entries armed during a turn fired in it.)
    #[test]
    fn next_follows_the_earliest_and_due_entries_come_in_order() {
        let t0 = Instant::now();
        let mut t: TimerTable<&str> = TimerTable::default();
        assert_eq!(t.next(), None);
        t.set("b", t0, 2 * MS);
        t.set("a", t0, MS);
        t.set("c", t0, 2 * MS);
        assert_eq!(t.next(), Some(t0 + MS));
        t.set("a", t0, 5 * MS);
        assert_eq!(t.next(), Some(t0 + 2 * MS));
        assert!(t.stop(&"b"));
        assert!(!t.stop(&"b"));
        assert_eq!(t.next(), Some(t0 + 2 * MS));
        t.set("b", t0, 2 * MS);
        let mark = t.mark();
        t.set("d", t0, Duration::ZERO);
        assert_eq!(t.next(), Some(t0));
        assert_eq!(t.take_due(t0 + 2 * MS, mark), Some("c"));
        assert_eq!(t.take_due(t0 + 2 * MS, mark), Some("b"));
        assert_eq!(
            t.take_due(t0 + 2 * MS, mark),
            None,
            "d was armed after the mark"
        );
        assert_eq!(t.take_due(t0 + 2 * MS, t.mark()), Some("d"));
        assert_eq!(t.next(), Some(t0 + 5 * MS));
        assert_eq!(t.take_due(t0 + 4 * MS, t.mark()), None);
        assert_eq!(t.take_due(t0 + 5 * MS, t.mark()), Some("a"));
        assert_eq!(t.next(), None);
    }

    /// `set_sooner` moves a timer only earlier, and arms one not armed. (The break: a retry
    /// armed for a later waiter's backoff delays the one due sooner.)
    #[test]
    fn set_sooner_only_moves_a_timer_earlier() {
        let t0 = Instant::now();
        let mut t: TimerTable<&str> = TimerTable::default();
        t.set_sooner("r", t0, 5 * MS);
        assert_eq!(t.at(&"r"), Some(t0 + 5 * MS));
        t.set_sooner("r", t0, 9 * MS);
        assert_eq!(t.at(&"r"), Some(t0 + 5 * MS));
        t.set_sooner("r", t0, 5 * MS);
        assert_eq!(t.at(&"r"), Some(t0 + 5 * MS));
        t.set_sooner("r", t0, 2 * MS);
        assert_eq!(t.at(&"r"), Some(t0 + 2 * MS));
        assert_eq!(t.next(), Some(t0 + 2 * MS));
        t.set_sooner("r", t0, Duration::MAX);
        assert_eq!(t.at(&"r"), Some(t0 + 2 * MS), "beyond the clock: unchanged");
    }
    /// A timer with data, as a lock's `Expiry(holder, epoch)` is.
    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    enum T {
        Unit,
        Of(u8),
    }

    /// Stopping answers whether the timer was armed, and disarms it, exactly as a table without
    /// the per-variant counts would: a seeded run of sets (new and replacing), stops and due
    /// takes, checked against a plain set after each. (The breaks: a count not raised when a
    /// variant is armed again after its last stop, or raised on a replacement and so never
    /// back to zero, or lowered by a stop that found nothing: a stop then misses an armed timer
    /// and it fires later all the same.)
    #[test]
    fn stop_skips_only_variants_none_of_which_is_armed() {
        let t0 = Instant::now();
        let mut t: TimerTable<T> = TimerTable::default();
        let mut model = std::collections::HashSet::new();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        for step in 0..20_000u32 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let pick = (seed >> 33) as u8;
            let timer = if pick.is_multiple_of(4) {
                T::Unit
            } else {
                T::Of(pick % 3)
            };
            match (seed >> 40) % 5 {
                0 | 1 => {
                    t.set(timer.clone(), t0, MS * u32::from(pick % 7));
                    model.insert(timer);
                }
                2 | 3 => assert_eq!(t.stop(&timer), model.remove(&timer), "step {step}"),
                _ => {
                    if let Some(due) = t.take_due(t0 + 3 * MS, t.mark()) {
                        assert!(model.remove(&due), "step {step}: {due:?} was not armed");
                    }
                }
            }
            for timer in [T::Unit, T::Of(0), T::Of(1), T::Of(2)] {
                assert_eq!(t.is_armed(&timer), model.contains(&timer), "step {step}");
            }
            // A variant without data is armed exactly when its variant is.
            assert_eq!(
                t.is_armed_kind(&T::Unit),
                model.contains(&T::Unit),
                "step {step}"
            );
            let any_of = model.iter().any(|m| matches!(m, T::Of(_)));
            assert_eq!(t.is_armed_kind(&T::Of(9)), any_of, "step {step}");
        }
    }
}
