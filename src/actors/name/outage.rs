//! [`Outage`]: Redis not answering a name, as both families' states know it (the link of a
//! lock's state, `lock_state/link.rs`, and of a synchronizer's, `sync_state/link.rs`): a failure
//! begins it or gives it a newer cause, an answer ends it. What a wait that meets it is answered
//! is each family's rule (their `outage.rs`).

use std::time::{Duration, Instant};

use crate::error::LockError;

/// Redis has not answered since `since`; `cause` is the last failure.
#[derive(Debug)]
struct Away {
    since: Instant,
    cause: LockError,
}

/// Whether Redis is away for a name, since when and why. Its invariant: away only from a
/// failure until the next answer.
#[derive(Debug, Default)]
pub(crate) struct Outage(Option<Away>);

impl Outage {
    /// Redis did not answer (or refused for a passing state) with `cause`, since `since`:
    /// whether an outage began with it (one under way takes the newer cause).
    pub(crate) fn away(&mut self, cause: LockError, since: Instant) -> bool {
        match &mut self.0 {
            Some(away) => {
                away.cause = cause;
                false
            }
            None => {
                self.0 = Some(Away { since, cause });
                true
            }
        }
    }

    /// Redis answered: whether an outage ended with it.
    pub(crate) fn back(&mut self) -> bool {
        self.0.take().is_some()
    }

    /// Whether Redis is away.
    pub(crate) fn is_away(&self) -> bool {
        self.0.is_some()
    }

    /// The outage's cause, while Redis is away.
    pub(crate) fn cause(&self) -> Option<LockError> {
        self.0.as_ref().map(|away| away.cause.clone())
    }

    /// How long a waiter that arrived at `since` has seen Redis away by `now` (counted from the
    /// later of its arrival and the outage's start), while Redis is away.
    pub(crate) fn away_for(&self, since: Instant, now: Instant) -> Option<Duration> {
        let away = self.0.as_ref()?;
        Some(now.saturating_duration_since(since.max(away.since)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    /// A waiter has seen Redis away from the later of its arrival and the outage's start: one
    /// that arrived before the outage counts from its start, one that arrived during it from its
    /// arrival. (The break: counting from the arrival only, which answers a waiter that waited
    /// long before Redis went away `Unavailable` at the outage's first failure.)
    #[test]
    fn a_wait_sees_redis_away_from_the_later_of_its_arrival_and_the_outage() {
        let t0 = Instant::now();
        let mut outage = Outage::default();
        assert_eq!(outage.away_for(t0, t0 + SECOND), None);
        assert!(outage.away(LockError::Shutdown, t0 + 10 * SECOND));
        assert_eq!(outage.away_for(t0, t0 + 12 * SECOND), Some(2 * SECOND));
        let later = t0 + 11 * SECOND;
        assert_eq!(outage.away_for(later, t0 + 12 * SECOND), Some(SECOND));
    }

    /// The first failure begins an outage and a later one only renews its cause (its start
    /// stays); an answer ends it, once. (The break: a later failure restarting the outage,
    /// which would put every waiter's bound off for as long as failures keep coming.)
    #[test]
    fn a_failure_begins_an_outage_once_and_an_answer_ends_it() {
        let t0 = Instant::now();
        let mut outage = Outage::default();
        assert!(!outage.back());
        assert!(outage.away(LockError::Shutdown, t0));
        assert!(!outage.away(LockError::pubsub_lost("test"), t0 + SECOND));
        assert!(outage.is_away());
        let cause = outage.cause();
        assert!(cause.is_some() && !matches!(cause, Some(LockError::Shutdown)));
        assert_eq!(outage.away_for(t0, t0 + 3 * SECOND), Some(3 * SECOND));
        assert!(outage.back());
        assert!(!outage.is_away());
        assert!(outage.cause().is_none());
        assert!(!outage.back());
    }
}
