//! The spans users see in their traces: one per acquire (every kind of lock, MultiLock and
//! RedLock, semaphores, latch waits) and one per release, at DEBUG level under the `lockman`
//! target. With no subscriber that wants them, creating one is a check of a cached interest and
//! recording into it does nothing. A span lives as long as the call: an exporter shows how long a
//! request waited for lock `orders:42`, and whether it waited at all.
//!
//! Fields: `name`, `kind`, `wait` (how long the caller was willing to wait), then `outcome`
//! (`acquired`, `timed_out`, `unavailable` (Redis away: [`LockError::Unavailable`]), `failed`;
//! a latch's `opened`; for a release `released`,
//! `not_held`, `failed`) and `waited` (the first attempt found it taken: the answer came from a
//! release's message, a hand-off, a TTL or a retry; not recorded for a latch). A lock acquire
//! still unanswered after [`LOOKUP_AFTER`] also records whom it waited behind, when the span is
//! wanted: `behind` (the holder id), `behind_client` and `behind_service` (from the holder's
//! client record, when it has one).
//!
//! Elections have two spans of their own. `lockman.campaign` lives as long as a campaign (its
//! fenced lock's `lockman.acquire` inside it): `name`, `wait`, then `outcome` (`won`,
//! `timed_out`, `unavailable`, `failed`) and, when won, `term`. `lockman.term` lives as long as the lead it
//! won, from the win until the [`Leadership`](crate::Leadership) is resigned or dropped:
//! `name`, `term`, `holder`, then `ended` (`resigned`, or `lost` when the lead was known lost
//! by then); a resign's `lockman.release` is inside it.

use std::future::Future;
use std::time::Duration;

use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::actors::messages::Wait;
use crate::error::LockError;
use crate::protocol::Commands;

/// How long a traced lock acquire goes unanswered before it looks up who holds the lock: an
/// uncontended acquire is answered well within it, so it never pays for the lookup.
pub(crate) const LOOKUP_AFTER: Duration = Duration::from_millis(10);

/// The span of one acquire of `kind` on `name`. Neither is formatted unless a subscriber wants
/// the span. Out of line: the span's making, wanted or not, is one copy, not inlined into
/// every acquire's future.
#[inline(never)]
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
        waited = Empty,
        behind = Empty,
        behind_client = Empty,
        behind_service = Empty
    )
}

/// `work` inside a `span` a subscriber wants, boxed: the caller awaits its work bare when the
/// span is disabled (a disabled span's `Instrument` wrapper still enters and exits it at every
/// poll and on drop, for nothing: about 1 k instructions per acquire and release,
/// BENCHMARKS.md), and the traced path's future is then a pointer in the caller's.
#[cold]
pub(crate) fn within<'a, F: Future + 'a>(
    span: &Span,
    work: F,
) -> std::pin::Pin<Box<impl Future<Output = F::Output> + 'a>> {
    Box::pin(work.instrument(span.clone()))
}

/// `acquire` as the wanted acquire `span` tells of: inside it and [`behind`] it, boxed (its
/// look-up, two commands' futures, would otherwise sit in every acquire's future, copied each
/// time the future moves, traced or not). The caller awaits its acquire bare when the span is
/// disabled.
#[cold]
pub(crate) fn acquiring<'a, F: Future + 'a>(
    span: &'a Span,
    commands: &'a Commands,
    name: &'a str,
    own: &'a str,
    acquire: F,
) -> std::pin::Pin<Box<impl Future<Output = F::Output> + 'a>> {
    let traced = behind(span, commands, name, own, acquire).instrument(span.clone());
    Box::pin(traced)
}

/// Runs `acquire` inside a wanted `span` ([`acquiring`]); when the acquire is not
/// answered within [`LOOKUP_AFTER`], also reads who holds `name` (another holder than `own`) and that holder's
/// service, and records them. The lookup never delays the answer: whatever it has not found
/// when the acquire is answered is not recorded.
async fn behind<F: Future>(
    span: &Span,
    commands: &Commands,
    name: &str,
    own: &str,
    acquire: F,
) -> F::Output {
    let mut acquire = std::pin::pin!(acquire);
    tokio::select! {
        biased;
        out = &mut acquire => return out,
        () = tokio::time::sleep(LOOKUP_AFTER) => {}
    }
    let lookup = async {
        let Ok(described) = commands.describe(name).await else {
            return;
        };
        // A group multi-lock's hash names each member's owner in the member's field.
        let group = described
            .fields
            .iter()
            .any(|(field, _)| field.ends_with(":expire_time"));
        let holder = described
            .fields
            .iter()
            .filter(|(field, _)| !group || !field.contains(':'))
            .map(|(field, value)| match group {
                true => value.as_str(),
                false => field.strip_suffix(":write").unwrap_or(field),
            })
            .find(|h| *h != own && *h != "mode");
        let Some(holder) = holder else { return };
        span.record("behind", holder);
        // Holder ids are `<client id>:<n>`; Redisson's client ids are UUIDs too.
        let Some(client) = holder
            .get(..36)
            .filter(|c| uuid::Uuid::parse_str(c).is_ok())
        else {
            return;
        };
        span.record("behind_client", client);
        if let Ok(Some(service)) = commands.client_service(client).await {
            span.record("behind_service", service.as_str());
        }
    };
    let mut lookup = std::pin::pin!(lookup);
    let mut looking = true;
    loop {
        tokio::select! {
            biased;
            out = &mut acquire => return out,
            () = &mut lookup, if looking => looking = false,
        }
    }
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
    ended(span, res, ("acquire", "acquired"), |granted| {
        // A time-out waited.
        span.record("waited", granted.is_none_or(&waited));
    });
}

/// Records the `outcome` of an acquire or a campaign: `got` when it got what it asked for,
/// `timed_out`, or `failed` (with an event saying why); then what `record` records of it.
/// Cold: only a span a subscriber wants gets here.
#[cold]
#[inline(never)]
fn ended<G>(
    span: &Span,
    res: &Result<Option<G>, LockError>,
    (what, got): (&str, &'static str),
    record: impl FnOnce(Option<&G>),
) {
    if span.is_disabled() {
        return;
    }
    match res {
        Ok(granted) => {
            span.record("outcome", if granted.is_some() { got } else { "timed_out" });
            record(granted.as_ref());
        }
        Err(e) => {
            span.record("outcome", failed(e));
            tracing::debug!(parent: span, error = %e, "{what} failed");
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
            Err(e) => failed(e),
        },
    );
}

/// The `outcome` of a wait that failed with `e`: Redis away is told apart from other failures.
fn failed(e: &LockError) -> &'static str {
    match e {
        LockError::Unavailable { .. } => "unavailable",
        _ => "failed",
    }
}

/// The span of one campaign for the election `name`.
pub(crate) fn campaign(name: &str, wait: Wait) -> Span {
    tracing::debug_span!(
        target: "lockman",
        "lockman.campaign",
        name,
        wait = ?wait,
        outcome = Empty,
        term = Empty
    )
}

/// Records how a campaign ended: `term` is the term won.
pub(crate) fn campaigned<L>(
    span: &Span,
    res: &Result<Option<L>, LockError>,
    term: impl Fn(&L) -> u64,
) {
    ended(span, res, ("campaign", "won"), |lead| {
        if let Some(lead) = lead {
            span.record("term", term(lead));
        }
    });
}

/// The span of one term of the election `name`, won by `holder`; it follows from the
/// campaign that won it.
pub(crate) fn term(name: &str, term: u64, holder: &str, campaign: &Span) -> Span {
    let span = tracing::debug_span!(
        target: "lockman",
        "lockman.term",
        name,
        term,
        holder,
        ended = Empty
    );
    span.follows_from(campaign);
    span
}

/// The span of one release of `kind` on `name` (out of line, as [`acquire`]'s).
#[inline(never)]
pub(crate) fn release(name: &str, kind: &dyn std::fmt::Debug) -> Span {
    tracing::debug_span!(target: "lockman", "lockman.release", name, kind = ?kind, outcome = Empty)
}

/// Records how a release ended.
pub(crate) fn released(span: &Span, res: &Result<(), LockError>) {
    if !span.is_disabled() {
        record_release(span, res);
    }
}

/// [`released`], for a span a subscriber wants.
#[cold]
#[inline(never)]
fn record_release(span: &Span, res: &Result<(), LockError>) {
    span.record(
        "outcome",
        match res {
            Ok(()) => "released",
            Err(LockError::NotHeld { .. }) => "not_held",
            Err(_) => "failed",
        },
    );
}
