//! [`Refusal`]: why a request did not get its lock or permit, and the response that says so
//! (a status, a `Retry-After` for the retryable ones, a fixed text as the body).

use http::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER, X_CONTENT_TYPE_OPTIONS};
use http::{Response, StatusCode};

#[cfg(doc)]
use super::LockLayer;
use super::body::Guarded;
use crate::error::LockError;
use crate::handles::admission;

/// Why a request did not get its lock or permit. The service answers it itself (a status, a
/// `Retry-After` for the retryable ones, a fixed text as the body: see the module's docs); the
/// response carries it in its extensions, for its [`status`](Self::status) and its text (this
/// error's `Display`, with the name and the [`LockError`], which the body leaves out).
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The request lacks what names its lock: `400`.
    #[error("the request has no {0} to name its lock")]
    NoKey(String),
    /// The request's value cannot name a lock (it holds `{` or `}`, or, without a prefix,
    /// starts with `redisson_` or `lockman_`): `400`.
    #[error("lock name {value:?} refused: {reason}")]
    Refused {
        /// The value, after the canonical form.
        value: String,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// The [`known`](LockLayer::known) hook refused the request's value: `404`.
    #[error("{value:?} is not a known name")]
    Unknown {
        /// The value, after the canonical form.
        value: String,
    },
    /// The lock stayed busy (or no permit was free) for the whole wait: the configured status
    /// (`409` for a lock, `429` for a permit, by default), with `Retry-After`.
    #[error("{name:?} is busy; retry later")]
    Busy {
        /// The lock or semaphore name.
        name: String,
        /// The answer's status.
        status: StatusCode,
        /// Its `Retry-After`, in seconds.
        retry_after: u64,
    },
    /// lockman failed: `503` with `Retry-After` when the error is retryable (Redis away), `500`
    /// otherwise.
    #[error("lock unavailable: {source}")]
    Lock {
        /// What lockman said.
        source: LockError,
        /// `Retry-After`, in seconds, for a retryable error.
        retry_after: u64,
    },
}

impl Refusal {
    /// The status of the answer.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::NoKey(_) | Self::Refused { .. } => StatusCode::BAD_REQUEST,
            Self::Unknown { .. } => StatusCode::NOT_FOUND,
            Self::Busy { status, .. } => *status,
            Self::Lock { source, .. } if source.is_retryable() => StatusCode::SERVICE_UNAVAILABLE,
            Self::Lock { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Its `Retry-After`, in seconds, when it has one.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Self::Busy { retry_after, .. } => Some(*retry_after),
            Self::Lock {
                source,
                retry_after,
            } if source.is_retryable() => Some(*retry_after),
            _ => None,
        }
    }

    /// The answer's body: never the request's value, never a [`LockError`]'s text.
    fn body(&self) -> String {
        match self {
            Self::NoKey(_) => self.to_string(),
            Self::Refused { reason, .. } => admission::refused_text(reason),
            Self::Unknown { .. } => admission::UNKNOWN.to_owned(),
            Self::Busy { .. } => admission::BUSY.to_owned(),
            Self::Lock { .. } => admission::UNAVAILABLE.to_owned(),
        }
    }

    pub(super) fn response<B>(self) -> Response<Guarded<B>> {
        let mut response = Response::new(Guarded::refusal(self.body()));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        if let Some(after) = self.retry_after() {
            headers.insert(RETRY_AFTER, HeaderValue::from(after));
        }
        response.extensions_mut().insert(self);
        response
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A failure of lockman is never answered as busy: retryable is `503` with `Retry-After`,
    /// anything else `500`, both with the fixed text, and the error kept in the extensions.
    #[test]
    fn a_failure_is_503_when_retryable_else_500_never_busy() {
        let timeout = LockError::Timeout {
            op: "acquire",
            after: Duration::from_secs(1),
        };
        let wrong = LockError::WrongType {
            key: "account:secret-host".into(),
        };
        for (source, status, retry_after) in [
            (timeout, StatusCode::SERVICE_UNAVAILABLE, Some("3")),
            (wrong, StatusCode::INTERNAL_SERVER_ERROR, None),
        ] {
            let refusal = Refusal::Lock {
                source,
                retry_after: 3,
            };
            let response: Response<Guarded<String>> = refusal.response();
            assert_eq!(response.status(), status);
            let header = |name| response.headers().get(name).map(|v| v.to_str().unwrap());
            assert_eq!(header(RETRY_AFTER), retry_after);
            assert_eq!(header(X_CONTENT_TYPE_OPTIONS), Some("nosniff"));
            assert_eq!(
                response.body().refusal_text(),
                Some(&b"lock service unavailable"[..])
            );
            assert!(matches!(
                response.extensions().get::<Refusal>(),
                Some(Refusal::Lock { .. })
            ));
        }
    }
}
