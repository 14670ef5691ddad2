//! The spans users see in their traces: one per acquire (every kind of lock, MultiLock and
//! RedLock, semaphores, latch waits) and one per release, at DEBUG level under the `lockman`
//! target. With no subscriber that wants them, creating one is a check of a cached interest and
//! recording into it does nothing. A span lives as long as the call: an exporter shows how long a
//! request waited for lock `orders:42`, and whether it waited at all.
//!
//! Fields: `name`, `kind`, `wait` (how long the caller was willing to wait), then `outcome`
//! (`acquired`, `timed_out`, `failed`; a latch's `opened`; for a release `released`,
//! `not_held`, `failed`) and `waited` (the first attempt found it taken: the answer came from a
//! release's message, a hand-off, a TTL or a retry; not recorded for a latch).

use tracing::Span;
use tracing::field::Empty;

use crate::actors::messages::Wait;
use crate::error::LockError;

/// The span of one acquire of `kind` on `name`. Neither is formatted unless a subscriber wants
/// the span.
pub(crate) fn acquire(
    name: &dyn std::fmt::Display,
    kind: &dyn std::fmt::Debug,
    wait: Wait,
) -> Span {
    tracing::debug_span!(
        target: "lockman",
        "lockman.acquire",
        name = %name,
        kind = ?kind,
        wait = ?wait,
        outcome = Empty,
        waited = Empty
    )
}

/// Records how an acquire ended; `waited` says whether a grant came after waiting.
pub(crate) fn acquired<G>(
    span: &Span,
    res: &Result<Option<G>, LockError>,
    waited: impl Fn(&G) -> bool,
) {
    if span.is_disabled() {
        return;
    }
    match res {
        Ok(Some(granted)) => {
            span.record("outcome", "acquired");
            span.record("waited", waited(granted));
        }
        Ok(None) => {
            span.record("outcome", "timed_out");
            span.record("waited", true);
        }
        Err(e) => {
            span.record("outcome", "failed");
            tracing::debug!(parent: span, error = %e, "acquire failed");
        }
    }
}

/// Records how a latch wait ended (`opened`, `timed_out`, `failed`); whether it waited is not
/// recorded.
pub(crate) fn opened(span: &Span, res: &Result<bool, LockError>) {
    if span.is_disabled() {
        return;
    }
    span.record(
        "outcome",
        match res {
            Ok(true) => "opened",
            Ok(false) => "timed_out",
            Err(_) => "failed",
        },
    );
}

/// The span of one release of `kind` on `name`.
pub(crate) fn release(name: &str, kind: &dyn std::fmt::Debug) -> Span {
    tracing::debug_span!(target: "lockman", "lockman.release", name, kind = ?kind, outcome = Empty)
}

/// Records how a release ended.
pub(crate) fn released(span: &Span, res: &Result<(), LockError>) {
    if span.is_disabled() {
        return;
    }
    span.record(
        "outcome",
        match res {
            Ok(()) => "released",
            Err(LockError::NotHeld { .. }) => "not_held",
            Err(_) => "failed",
        },
    );
}
