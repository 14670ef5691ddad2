//! What the HTTP fronts (`lockman::tower` and `lockman::web`) share: how a value read from a
//! request becomes a lock name, how a request takes its lock or permit (the [`Admission`]: the
//! wait, the `Retry-After`, the names whose permits are set), and the fixed texts of their
//! answers. Each front keeps only reading the request, its own refusal type (status, headers),
//! and handing the guard over.
//!
//! **The name is the value the handler sees.** A path segment is percent-decoded once, every
//! `%XX` escape (`%2F`, `%25` and `%2B` included; an invalid escape such as `%zz` kept as it is,
//! bytes that are not UTF-8 replaced by U+FFFD), which is what axum's `Path` and actix-web's
//! `web::Path` hand the handler; `+` stays `+`. Nothing else is changed: case, Unicode
//! normalisation, a trailing slash or leading zeros are the application's to canonicalise, with
//! the front's `canonical` hook, when its handler does.
//!
//! **Names from requests are checked** before anything is written to Redis: a value holding `{`
//! or `}` (which would share derived keys with another name), or, without a prefix, one that
//! starts with `redisson_` or `lockman_` (Redisson's and lockman's own keys), is refused with
//! `400`; a value the `known` hook refuses gets `404`.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::LockError;
use crate::handles::lock::LockGuard;
use crate::handles::manager::LockManager;
use crate::handles::sync::{PermitGuard, PermitSemaphore};

/// The body of every `500` and `503`: the `LockError` behind it goes to the log, not the client.
pub(crate) const UNAVAILABLE: &str = "lock service unavailable";

/// The body of a busy answer (`409`, `429` or the configured status): no part of the request.
pub(crate) const BUSY: &str = "busy; retry later";

/// The body of a `404` for a value the `known` hook refused.
pub(crate) const UNKNOWN: &str = "not found";

/// The body of a `400` for a value that cannot name a lock (one of [`Naming::name`]'s reasons).
pub(crate) fn refused_text(reason: &str) -> String {
    format!("the request's lock name is refused: {reason}")
}

/// A value holding `{` or `}`.
pub(crate) const BRACES: &str = "it holds `{` or `}`";

/// An unprefixed value that starts as lockman's or Redisson's own keys do.
pub(crate) const RESERVED: &str = "it starts with `redisson_` or `lockman_`";

/// An application's canonical form of a value (e.g. lower case), applied before anything else.
pub(crate) type Canonical = dyn Fn(&str) -> String + Send + Sync;

/// An application's check of a value: `false` answers `404` before anything is written.
pub(crate) type Known = dyn Fn(&str) -> bool + Send + Sync;

/// Why a request's value names no lock.
#[derive(Debug)]
pub(crate) enum Unnamed {
    /// The value is missing, or empty (after the canonical form): `400`.
    Missing,
    /// The value cannot name a lock (`reason`: [`BRACES`] or [`RESERVED`]): `400`.
    Refused { value: String, reason: &'static str },
    /// The `known` hook refused it: `404`.
    Unknown { value: String },
}

/// How a front turns the value it read from a request into a lock name.
#[derive(Clone, Default)]
pub(crate) struct Naming {
    pub(crate) prefix: String,
    pub(crate) canonical: Option<Arc<Canonical>>,
    pub(crate) known: Option<Arc<Known>>,
}

impl fmt::Debug for Naming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Naming")
            .field("prefix", &self.prefix)
            .field("canonical", &self.canonical.is_some())
            .field("known", &self.known.is_some())
            .finish()
    }
}

impl Naming {
    /// The lock name of a request whose value (already decoded as its handler sees it) is
    /// `value`: canonicalised, checked, then prefixed.
    pub(crate) fn name(&self, value: Option<String>) -> Result<String, Unnamed> {
        let value = value.filter(|v| !v.is_empty()).ok_or(Unnamed::Missing)?;
        let value = match &self.canonical {
            Some(canonical) => canonical(&value),
            None => value,
        };
        if value.is_empty() {
            return Err(Unnamed::Missing);
        }
        let reason = if value.contains(['{', '}']) {
            Some(BRACES)
        } else if self.prefix.is_empty()
            && (value.starts_with("redisson_") || value.starts_with("lockman_"))
        {
            Some(RESERVED)
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(Unnamed::Refused { value, reason });
        }
        if let Some(known) = &self.known
            && !known(&value)
        {
            return Err(Unnamed::Unknown { value });
        }
        Ok(format!("{}{value}", self.prefix))
    }
}

/// What a request is given for its lock name, the same for every front: how long it waits, and
/// the `Retry-After` of a busy or retryable answer.
#[derive(Clone, Debug)]
pub(crate) struct Admission {
    manager: LockManager,
    pub(crate) naming: Naming,
    pub(crate) wait: Duration,
    pub(crate) retry_after: Duration,
}

/// Why a request did not get its lock or permit once it had a name; each front makes its
/// refusal of it.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Busy (or no permit free) for the whole wait.
    Busy,
    /// lockman failed (logged already).
    Lock(LockError),
}

/// The permits of a permit semaphore per name, and the names this process has set (or found
/// set): set once, not per request.
#[derive(Clone, Debug)]
pub(crate) struct Permits {
    permits: u32,
    set: Arc<Mutex<HashSet<String>>>,
}

/// How many names [`Permits`] remembers as set before it forgets them all (and sets each again,
/// once, when next seen): a bound on its memory.
const REMEMBERED_NAMES: usize = 10_000;

impl Permits {
    pub(crate) fn new(permits: u32) -> Self {
        Self {
            permits,
            set: Arc::default(),
        }
    }

    /// Sets the permits of `sem` unless this process did already (a semaphore set before keeps
    /// its own count).
    async fn ensure_set(&self, sem: &PermitSemaphore) -> Result<(), LockError> {
        let known = self.set.lock().is_ok_and(|set| set.contains(sem.name()));
        if !known {
            sem.try_set_permits(self.permits).await?;
            if let Ok(mut set) = self.set.lock() {
                if set.len() >= REMEMBERED_NAMES {
                    set.clear();
                }
                set.insert(sem.name().to_owned());
            }
        }
        Ok(())
    }

    fn forget(&self, name: &str) {
        if let Ok(mut set) = self.set.lock() {
            set.remove(name);
        }
    }
}

impl Admission {
    /// Defaults: no prefix, no hooks, a wait of 1 s, `Retry-After: 1`.
    pub(crate) fn new(manager: LockManager) -> Self {
        Self {
            manager,
            naming: Naming::default(),
            wait: Duration::from_secs(1),
            retry_after: Duration::from_secs(1),
        }
    }

    /// The `Retry-After` in whole seconds, at least 1.
    pub(crate) fn retry_after_secs(&self) -> u64 {
        self.retry_after.as_secs_f64().ceil().max(1.0) as u64
    }

    /// Takes the lock `name`, waiting up to the configured time.
    pub(crate) async fn lock(&self, name: &str) -> Result<LockGuard, Failure> {
        let outcome = self.manager.lock(name).try_acquire_for(self.wait).await;
        settle(name, outcome)
    }

    /// Takes a permit of the semaphore `name` (setting its permits first, once), waiting up to
    /// the configured time. Setting the permits is part of the wait: both end by the wait plus a
    /// wait's last try (`Config::last_try_grace`: 250 ms, plus the sync timeout with replica
    /// sync), so that a frozen server is `503` near the wait, not a response timeout later (a
    /// dropped acquire leaves nothing held).
    pub(crate) async fn permit(
        &self,
        name: &str,
        permits: &Permits,
    ) -> Result<PermitGuard, Failure> {
        let started = Instant::now();
        let sem = self.manager.permit_semaphore(name);
        let admit = async {
            permits.ensure_set(&sem).await?;
            let left = self.wait.saturating_sub(started.elapsed());
            sem.try_acquire_for(1, left).await
        };
        let until = started + self.wait + self.manager.inner.config.last_try_grace();
        let outcome = tokio::time::timeout_at(until.into(), admit)
            .await
            .unwrap_or_else(|_| {
                let waited = started.elapsed();
                let cause = LockError::Timeout {
                    op: "a permit semaphore's answer",
                    after: waited,
                };
                Err(LockError::unavailable(name, waited, cause))
            });
        if let Ok(None) = outcome {
            // Busy, or the semaphore's key was lost (a restart without its data): set it again
            // at the next request, which is a no-op when it exists.
            permits.forget(name);
        }
        settle(name, outcome)
    }
}

/// The end of a request's wait: a failure of lockman is logged here, and is never busy.
fn settle<G>(name: &str, outcome: Result<Option<G>, LockError>) -> Result<G, Failure> {
    match outcome {
        Ok(Some(guard)) => Ok(guard),
        Ok(None) => Err(Failure::Busy),
        Err(e) => {
            log_failure(name, &e);
            Err(Failure::Lock(e))
        }
    }
}

/// `segment` percent-decoded as axum's `Path` and actix-web's `web::Path` decode it: every `%`
/// followed by two hex digits is that byte, anything else is kept, and the bytes are read as
/// UTF-8 with U+FFFD for what is not (axum refuses such a segment with `400` before the handler
/// runs; one lock for all of them excludes more, never less).
pub(crate) fn percent_decoded(segment: &str) -> String {
    if !segment.contains('%') {
        return segment.to_owned();
    }
    let hex = |b: u8| char::from(b).to_digit(16);
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if let [b'%', high, low, ..] = bytes[i..]
            && let (Some(high), Some(low)) = (hex(high), hex(low))
        {
            // Two hex digits: at most 0xFF.
            out.push((high * 16 + low) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Logs why a request was answered `500` or `503`, since its body says only [`UNAVAILABLE`].
fn log_failure(name: &str, error: &LockError) {
    if error.is_retryable() {
        tracing::warn!(lock = ?name, %error, "request answered 503: {UNAVAILABLE}");
    } else {
        tracing::error!(lock = ?name, %error, "request answered 500: {UNAVAILABLE}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_every_escape_as_the_extractors_do() {
        for (raw, seen) in [
            ("alice", "alice"),
            ("%61lice", "alice"),
            ("%61%6C%69%63%65", "alice"),
            ("%61%6c%69%63%65", "alice"),
            ("a%2Fb", "a/b"),
            ("a%2fb", "a/b"),
            ("a%2Bb", "a+b"),
            ("a+b", "a+b"),
            ("a%25b", "a%b"),
            ("a%2541", "a%41"),
            ("%", "%"),
            ("a%", "a%"),
            ("a%4", "a%4"),
            ("a%zz", "a%zz"),
            ("a%4g", "a%4g"),
            ("%C3%A9", "é"),
            ("%FF", "\u{FFFD}"),
            ("%C3", "\u{FFFD}"),
        ] {
            assert_eq!(percent_decoded(raw), seen, "{raw}");
        }
    }

    #[test]
    fn checks_then_prefixes() {
        let plain = Naming::default();
        assert_eq!(plain.name(Some("alice".into())).unwrap(), "alice");
        assert!(matches!(plain.name(None), Err(Unnamed::Missing)));
        assert!(matches!(
            plain.name(Some(String::new())),
            Err(Unnamed::Missing)
        ));
        for (value, why) in [
            ("{x}", BRACES),
            ("a}", BRACES),
            ("redisson_lock_queue:{x}", BRACES),
            ("redisson_lock_queue:x", RESERVED),
            ("lockman_client:1", RESERVED),
        ] {
            match plain.name(Some(value.into())) {
                Err(Unnamed::Refused { reason, .. }) => assert_eq!(reason, why, "{value}"),
                other => panic!("{value}: {other:?}"),
            }
        }
        let prefixed = Naming {
            prefix: "account:".into(),
            canonical: Some(Arc::new(|v: &str| v.to_lowercase())),
            known: Some(Arc::new(|v: &str| v != "mallory")),
        };
        assert_eq!(
            prefixed.name(Some("redisson_x".into())).unwrap(),
            "account:redisson_x"
        );
        assert_eq!(
            prefixed.name(Some("ALICE".into())).unwrap(),
            "account:alice"
        );
        assert!(matches!(
            prefixed.name(Some("Mallory".into())),
            Err(Unnamed::Unknown { .. })
        ));
        assert!(matches!(
            prefixed.name(Some("{x}".into())),
            Err(Unnamed::Refused { .. })
        ));
    }
}
