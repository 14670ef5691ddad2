//! Metrics, through the [`metrics`](https://docs.rs/metrics) facade, with the `metrics` feature:
//! the application installs a recorder (a Prometheus exporter, say) and lockman reports to it.
//! Without the feature every function here is empty and compiles away.
//!
//! The metrics and their labels are listed in one table, in the README ("Metrics"); keep it
//! true when adding one here.

#[cfg(feature = "metrics")]
use std::time::Instant;

/// When an acquire request arrived: an `Instant` with the feature, nothing without.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Since {
    #[cfg(feature = "metrics")]
    at: Instant,
}

impl Since {
    #[inline]
    pub(crate) fn now() -> Self {
        Self {
            #[cfg(feature = "metrics")]
            at: Instant::now(),
        }
    }
}

/// Which family's series a per-name actor reports to: lock kinds' or synchronizer kinds'
/// (`kind`: the kind's label).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Series {
    Locks,
    Syncs,
}

impl Series {
    /// A request began or stopped waiting for its answer (`delta` +1 or -1).
    #[inline]
    pub(crate) fn waiters(self, kind: &'static str, delta: f64) {
        match self {
            Series::Locks => waiters(kind, delta),
            Series::Syncs => sync_waiters(kind, delta),
        }
    }

    /// A request was answered (`outcome`: acquired, opened, timed_out, unavailable, failed,
    /// abandoned).
    #[inline]
    pub(crate) fn answered(self, kind: &'static str, outcome: &'static str, since: Since) {
        match self {
            Series::Locks => answered(kind, outcome, since),
            Series::Syncs => sync_answered(kind, outcome, since),
        }
    }

    /// A hold began or ended (`amount`: 1 for a lock's hold, a grant's permits), signed.
    #[inline]
    pub(crate) fn held(self, kind: &'static str, amount: f64) {
        match self {
            Series::Locks => holds(kind, amount),
            Series::Syncs => permits(kind, amount),
        }
    }

    /// A hold was lost (`why`: the reason label).
    #[inline]
    pub(crate) fn lost(self, kind: &'static str, why: &'static str) {
        match self {
            Series::Locks => lost(kind, why),
            Series::Syncs => permits_lost(kind, why),
        }
    }
}

/// An acquire request was answered.
#[inline]
fn answered(kind: &'static str, outcome: &'static str, since: Since) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!("lockman_acquire_total", "kind" => kind, "outcome" => outcome)
            .increment(1);
        metrics::histogram!("lockman_acquire_wait_seconds", "kind" => kind)
            .record(since.at.elapsed().as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, outcome, since);
}

/// A request began or stopped waiting for its answer (`delta` +1 or -1).
#[inline]
fn waiters(kind: &'static str, delta: f64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("lockman_waiters", "kind" => kind).increment(delta);
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, delta);
}

/// A hold began or ended (`delta` +1 or -1).
#[inline]
fn holds(kind: &'static str, delta: f64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("lockman_holds", "kind" => kind).increment(delta);
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, delta);
}

/// A hold ended without its release.
#[inline]
fn lost(kind: &'static str, why: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("lockman_lost_total", "kind" => kind, "reason" => why).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, why);
}

/// One watchdog tick: script calls made, holds renewed, holds whose call failed.
#[inline]
pub(crate) fn renewals(calls: usize, renewed: usize, failed: usize) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!("lockman_renewal_calls_total").increment(calls as u64);
        metrics::counter!("lockman_renewals_total").increment(renewed as u64);
        metrics::counter!("lockman_renewal_failures_total").increment(failed as u64);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (calls, renewed, failed);
}

/// Holds checked on the tracking connection after their keys were written (or the connection
/// was made again): found in place, found lost.
#[inline]
pub(crate) fn watch_checked(held: usize, lost: usize) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!("lockman_watch_checks_total", "found" => "held").increment(held as u64);
        metrics::counter!("lockman_watch_checks_total", "found" => "lost").increment(lost as u64);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (held, lost);
}

/// A connection was opened again after it was lost.
#[inline]
pub(crate) fn reconnected(connection: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("lockman_reconnects_total", "connection" => connection).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = connection;
}

/// Permits of a semaphore kind (`kind`: its label) began or stopped being held here (`delta`:
/// how many, signed).
#[inline]
fn permits(kind: &'static str, delta: f64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("lockman_permits_held", "kind" => kind).increment(delta);
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, delta);
}

/// A synchronizer request began or stopped waiting (`delta` +1 or -1).
#[inline]
fn sync_waiters(kind: &'static str, delta: f64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("lockman_sync_waiters", "kind" => kind).increment(delta);
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, delta);
}

/// A synchronizer wait was answered (`outcome`: acquired, opened, timed_out, unavailable, failed).
#[inline]
fn sync_answered(kind: &'static str, outcome: &'static str, since: Since) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!("lockman_sync_wait_total", "kind" => kind, "outcome" => outcome)
            .increment(1);
        metrics::histogram!("lockman_sync_wait_seconds", "kind" => kind)
            .record(since.at.elapsed().as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, outcome, since);
}

/// Permits of one grant were lost (`why`: renewal found them gone, or their lease ran out).
#[inline]
fn permits_lost(kind: &'static str, why: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("lockman_permits_lost_total", "kind" => kind, "reason" => why).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, why);
}

/// One watchdog tick's contention: the top names by wait time since the last tick (the
/// `name` label of `lockman_contended_wait_seconds`: at most `Config::contention_top_k` names
/// a tick), and how many names were waited on. A name that left the top since the last tick
/// (`shown`, updated here) is set to 0, so that its gauge does not keep an old value.
pub(crate) fn contention(
    top: &[(std::sync::Arc<str>, std::time::Duration)],
    contended: usize,
    shown: &mut Vec<std::sync::Arc<str>>,
) {
    #[cfg(feature = "metrics")]
    {
        metrics::gauge!("lockman_contended_names").set(contended as f64);
        for name in shown.iter() {
            if !top.iter().any(|(n, _)| n == name) {
                metrics::gauge!("lockman_contended_wait_seconds", "name" => name.to_string())
                    .set(0.0);
            }
        }
        for (name, waited) in top {
            metrics::gauge!("lockman_contended_wait_seconds", "name" => name.to_string())
                .set(waited.as_secs_f64());
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = contended;
    shown.clear();
    shown.extend(top.iter().map(|(n, _)| n.clone()));
}

/// An election's lead began or ended here (`delta` +1 or -1).
#[inline]
pub(crate) fn leader(name: &str, delta: f64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("lockman_leader", "name" => name.to_owned()).increment(delta);
    #[cfg(not(feature = "metrics"))]
    let _ = (name, delta);
}

/// A term of an election began (`won`) or ended (`resigned`, `lost`) here.
#[inline]
pub(crate) fn term(name: &str, outcome: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("lockman_terms_total", "name" => name.to_owned(), "outcome" => outcome)
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (name, outcome);
}

/// Whether the server this manager started on may evict lock keys (its `maxmemory-policy` is
/// not `noeviction`): the `lockman_evicting_server` gauge, 1 or 0.
#[inline]
pub(crate) fn evicting_server(evicts: bool) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("lockman_evicting_server").set(if evicts { 1.0 } else { 0.0 });
    #[cfg(not(feature = "metrics"))]
    let _ = evicts;
}

/// A cycle of waits was found among this manager's callers (`action`: `broken`, its youngest
/// wait failed; `reported`, left as it was): the `lockman_deadlocks_total` counter.
#[inline]
pub(crate) fn deadlock(action: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("lockman_deadlocks_total", "action" => action).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = action;
}
