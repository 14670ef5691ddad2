//! [`Leadership`]: the lead of an election, a fenced lock's hold under another name.

use std::future::Future;
use std::time::{Duration, Instant};

use tracing::{Instrument, Span};

use crate::actors::lost::LostSignal;
use crate::error::LockError;
use crate::handles::lock::FencedGuard;
use crate::handles::trace;

/// The lead of an [`Election`](super::Election), from [`campaign`](super::Election::campaign):
/// a [`FencedGuard`] whose token is the **term**. Dropping it resigns in the background;
/// [`resign`](Self::resign) does it and says how it went. Either way the next candidate is
/// woken by the release's unlock message, not by a TTL.
#[must_use = "dropping the leadership resigns at once"]
#[derive(Debug)]
pub struct Leadership {
    /// Counts the term's end when the leadership goes, however it goes (before the guard's
    /// drop releases the hold, which would read as lost).
    _term: Term,
    guard: FencedGuard,
}

impl Leadership {
    pub(super) fn won(guard: FencedGuard, campaign: &Span) -> Self {
        let term = Term {
            name: guard.name().into(),
            lost: guard.signal().clone(),
            ended: false,
            span: trace::term(guard.name(), guard.token(), guard.holder_id(), campaign),
        };
        crate::metrics::leader(guard.name(), 1.0);
        crate::metrics::term(guard.name(), "won");
        Self { guard, _term: term }
    }

    fn guard(&self) -> &FencedGuard {
        &self.guard
    }

    /// The term: the lead's fencing token, greater than every earlier term of this election
    /// (and every token of its lock), across failovers and data loss.
    pub fn term(&self) -> u64 {
        self.guard().token()
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.guard().name()
    }

    /// This candidate's holder id, as [`Leader::holder`](super::Leader::holder) shows it.
    pub fn holder_id(&self) -> &str {
        self.guard().holder_id()
    }

    /// The lock's guard, for what a [`FencedGuard`] offers beyond this.
    pub fn fenced_guard(&self) -> &FencedGuard {
        self.guard()
    }

    /// Whether the lead is known to be lost (its key gone, or unrenewable for a whole
    /// watchdog timeout).
    pub fn is_lost(&self) -> bool {
        self.guard().is_lost()
    }

    /// Resolves once the lead is known to be lost; never, while it lasts.
    pub async fn lost(&self) {
        self.guard().lost().await;
    }

    /// The latest instant the lead is still guaranteed (as [`Grant::valid_until`](crate::actix::Grant::valid_until)).
    pub fn valid_until(&self) -> Instant {
        self.guard().valid_until()
    }

    /// Runs `fut` only while leading: as [`LockGuard::scope`](crate::LockGuard::scope).
    ///
    /// # Errors
    /// [`LockError::HoldLost`] or [`LockError::HoldExpiring`].
    pub async fn scope<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        self.guard().scope(fut).await
    }

    /// As [`scope`](Self::scope), with its margin.
    ///
    /// # Errors
    /// As [`scope`](Self::scope).
    pub async fn scope_with_margin<F: Future>(
        &self,
        margin: Duration,
        fut: F,
    ) -> Result<F::Output, LockError> {
        self.guard().scope_with_margin(margin, fut).await
    }

    /// A fenced write with this term: as [`FencedGuard::fenced_set`]. `Ok(false)` when a
    /// later leader already wrote `key`.
    ///
    /// # Errors
    /// As [`FencedGuard::fenced_set`].
    pub async fn fenced_set(&self, key: &str, value: impl AsRef<[u8]>) -> Result<bool, LockError> {
        self.guard.fenced_set(key, value).await
    }

    /// Resigns: releases the lock, which wakes the next candidate at once.
    ///
    /// # Errors
    /// As [`LockGuard::release`](crate::LockGuard::release) ([`LockError::NotHeld`] when the
    /// lead was lost meanwhile).
    pub async fn resign(self) -> Result<(), LockError> {
        let Self {
            guard,
            _term: mut term,
        } = self;
        // Counted before the release: a released hold reads as lost.
        term.end();
        let span = term.span.clone();
        guard.release().instrument(span).await
    }
}

/// A term, counted in the metrics from its start to its end (lost, or resigned), and traced
/// by its `lockman.term` span, which closes when the term is dropped.
#[derive(Debug)]
struct Term {
    name: std::sync::Arc<str>,
    lost: LostSignal,
    ended: bool,
    span: Span,
}

impl Term {
    /// Counts the end once: lost if the hold is known lost by now, resigned otherwise.
    fn end(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        crate::metrics::leader(&self.name, -1.0);
        let how = if self.lost.is_lost() {
            "lost"
        } else {
            "resigned"
        };
        crate::metrics::term(&self.name, how);
        self.span.record("ended", how);
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        self.end();
    }
}
