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
