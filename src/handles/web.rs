//! actix-web integration (the `actix-web` feature): hold a lock, or a semaphore's permit, for
//! the duration of a request.
//!
//! Put a [`RequestLock`] in the `app_data` of an `App`, a scope or a resource, saying which path
//! segment or header names the lock, and take a [`RequestGuard`] as a handler argument: the
//! handler runs only once the lock is held, and the lock is released when the handler is done
//! (the guard is dropped with the handler's arguments), or earlier with
//! [`RequestGuard::release`]. A request that cannot have the lock within the wait gets `409
//! Conflict` (or the status you choose, e.g. `503`) with `Retry-After`, and the handler never runs.
//!
//! [`RequestPermits`] and [`RequestPermit`] do the same with a permit semaphore per key: at most
//! N requests per key run at once across every instance, and the others get `429 Too Many
//! Requests` (or `503`) with `Retry-After`.
//!
//! **The lock is named by the value the handler sees.** A path segment is taken fully
//! percent-decoded, as `web::Path` gives it to the handler (`match_info` keeps `%2F`, `%25` and
//! `%2B` encoded; the name does not): every `%XX`, `+` kept as `+`, bytes that are not UTF-8
//! replaced by U+FFFD. So `/accounts/alice/deposit` and `/accounts/%61lice/deposit` take the one
//! lock `account:alice`, and `a+b` and `a%2Bb` the lock of `a+b`. Nothing else is changed: case,
//! Unicode normalisation, leading zeros are the application's; when its handler treats `Alice`
//! and `alice` as one, give the extractor the same rule with `canonical`
//! ([`RequestLock::canonical`]): a lock protects a handler only if both agree on the name. A
//! header's value is taken as it is (visible ASCII, not decoded).
//!
//! **Names from requests**: a client chooses them, so always set a
//! [`prefix`](RequestLock::prefix) (`account:`), which keeps them apart from other names and from
//! Redisson's and lockman's own keys. A value holding `{` or `}` (lock `x` and lock `{x}` share
//! their derived keys) or, without a prefix, starting with `redisson_` or `lockman_` is answered
//! `400`. **[`RequestPermits`] leaves a key in Redis that never expires for every name it sees**
//! (a permit semaphore's count, Redisson's layout): its names must come from a bounded set; say
//! which with [`known`](RequestPermits::known), and any other value is answered `404` before
//! anything is written.
//!
//! Every refusal is `text/plain; charset=utf-8` with `X-Content-Type-Options: nosniff`, and its
//! body never repeats the request's value: `busy; retry later` (`409`, `429` or your status),
//! `not found` (`404`), `the request's lock name is refused: …` or `the request has no … to name
//! its lock` (`400`). A `500` or `503` says only `lock service unavailable`; its [`LockError`]
//! (which can name the Redis host, its user or a key) is logged (`tracing`, at `error` or
//! `warn`) and kept in the [`RequestLockError`], which actix-web attaches to the response
//! (`response.error()` in a middleware).
//!
//! ```no_run
//! use std::time::Duration;
//! use actix_web::{App, HttpResponse, HttpServer, web};
//! use lockman::web::{RequestGuard, RequestLock};
//!
//! async fn deposit(_lock: RequestGuard) -> HttpResponse {
//!     // ... read, change and write the account: no other request on it runs meanwhile ...
//!     HttpResponse::Ok().finish()
//! }
//!
//! # async fn demo() -> std::io::Result<()> {
//! let manager = lockman::LockManager::connect("redis://127.0.0.1:6379/0").await.expect("redis");
//! HttpServer::new(move || {
//!     App::new()
//!         .app_data(
//!             RequestLock::path(manager.clone(), "account")
//!                 .prefix("account:")
//!                 .wait(Duration::from_millis(200)),
//!         )
//!         .route("/accounts/{account}/deposit", web::post().to(deposit))
//! })
//! .bind(("127.0.0.1", 8080))?
//! .run()
//! .await
//! # }
//! ```

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::time::Duration;

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, RETRY_AFTER, X_CONTENT_TYPE_OPTIONS};
use actix_web::{FromRequest, HttpRequest, HttpResponse, ResponseError};

use crate::error::LockError;
use crate::handles::admission::{self, Admission, Failure, Permits, Unnamed};
use crate::handles::lock::LockGuard;
use crate::handles::manager::LockManager;
use crate::handles::sync::PermitGuard;

/// Where a request's lock name comes from.
#[derive(Clone, Debug)]
enum Key {
    Path(String),
    Header(String),
}

/// What both extractors are told: which part of the request names the lock or semaphore, what
/// to answer when it stays busy, and the [`Admission`] (name rules, wait, `Retry-After`) that
/// `lockman::tower` shares.
#[derive(Clone, Debug)]
struct Front {
    key: Key,
    busy: StatusCode,
    admission: Admission,
}

/// The builder methods of a type that holds a [`Front`] in `front`.
macro_rules! admission_builders {
    ($what:literal, $busy:literal) => {
        #[doc = concat!("Prepended to the segment or header value to make the ", $what, " name (e.g. `account:`). ")]
        /// Set one whenever names come from requests (see the module's docs).
        pub fn prefix(mut self, prefix: &str) -> Self {
            self.front.admission.naming.prefix = prefix.to_owned();
            self
        }

        /// The canonical form of a request's value, applied first (before the checks, the
        /// [`known`](Self::known) hook and the prefix): e.g. `|v| v.to_lowercase()` when the
        /// handler treats `Alice` and `alice` as one. An empty result is answered `400`.
        pub fn canonical<F>(mut self, canonical: F) -> Self
        where
            F: Fn(&str) -> String + Send + Sync + 'static,
        {
            self.front.admission.naming.canonical = Some(std::sync::Arc::new(canonical));
            self
        }

        /// Which values exist: a request whose (canonical) value `known` refuses is answered
        /// `404 Not Found` before anything is written to Redis or the handler runs. It is called
        /// once per request on the server's thread: keep it quick (a set lookup).
        pub fn known<F>(mut self, known: F) -> Self
        where
            F: Fn(&str) -> bool + Send + Sync + 'static,
        {
            self.front.admission.naming.known = Some(std::sync::Arc::new(known));
            self
        }

        #[doc = concat!("How long a request waits for its ", $what, ". Default: 1 s.")]
        pub fn wait(mut self, wait: Duration) -> Self {
            self.front.admission.wait = wait;
            self
        }

        #[doc = concat!("The status of a request whose ", $what, " stayed busy: ", $busy, " by default.")]
        pub fn busy_status(mut self, status: StatusCode) -> Self {
            self.front.busy = status;
            self
        }

        /// The `Retry-After` of a busy answer, in whole seconds (at least 1). Default: 1 s.
        pub fn retry_after(mut self, after: Duration) -> Self {
            self.front.admission.retry_after = after;
            self
        }
    };
}

impl Front {
    fn new(manager: LockManager, key: Key, busy: StatusCode) -> Self {
        Self {
            key,
            busy,
            admission: Admission::new(manager),
        }
    }

    fn name(&self, req: &HttpRequest) -> Result<String, RequestLockError> {
        let value = match &self.key {
            // `match_info` decodes every escape but `%2F`, `%25` and `%2B`; `web::Path` decodes
            // its value once more, fully: the same decoding here gives the handler's value.
            Key::Path(param) => req.match_info().get(param).map(admission::percent_decoded),
            Key::Header(name) => req
                .headers()
                .get(name.as_str())
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        };
        self.admission
            .naming
            .name(value)
            .map_err(|unnamed| match unnamed {
                Unnamed::Missing => RequestLockError::NoKey(match &self.key {
                    Key::Path(p) => format!("path segment {p:?}"),
                    Key::Header(h) => format!("header {h:?}"),
                }),
                Unnamed::Refused { value, reason } => RequestLockError::Refused { value, reason },
                Unnamed::Unknown { value } => RequestLockError::Unknown { value },
            })
    }

    /// The refusal of a request named `name` that did not get its lock or permit.
    fn refusal(&self, name: String, failure: Failure) -> RequestLockError {
        let retry_after = self.admission.retry_after_secs();
        match failure {
            Failure::Busy => RequestLockError::Busy {
                name,
                status: self.busy,
                retry_after,
            },
            Failure::Lock(source) => RequestLockError::Lock {
                source,
                retry_after,
            },
        }
    }
}

/// How requests take their lock: which part of the request names it, how long to wait, and what
/// to answer when it is busy. Put it in `app_data`; [`RequestGuard`] reads it.
#[derive(Clone, Debug)]
pub struct RequestLock {
    front: Front,
}

impl RequestLock {
    /// The lock is named by the path segment `param` (as in `/accounts/{account}`), decoded as
    /// `web::Path` decodes it (`%61lice` is `alice`; see the module's docs).
    pub fn path(manager: LockManager, param: &str) -> Self {
        let front = Front::new(manager, Key::Path(param.to_owned()), StatusCode::CONFLICT);
        Self { front }
    }

    /// The lock is named by the request header `name`.
    pub fn header(manager: LockManager, name: &str) -> Self {
        let front = Front::new(manager, Key::Header(name.to_owned()), StatusCode::CONFLICT);
        Self { front }
    }

    admission_builders!(
        "lock",
        "`409 Conflict`; `503 Service Unavailable` is the other usual choice"
    );
}

/// How requests take a permit: at most `permits` requests per key at once, across every instance
/// of the service (a [`PermitSemaphore`](crate::PermitSemaphore) per key, whose permits the
/// watchdog renews, so an instance that dies gives its permits back). Put it in `app_data`;
/// [`RequestPermit`] reads it.
///
/// **Each name leaves a key in Redis that never expires** (the semaphore's count, Redisson's
/// layout): names must come from a bounded set. Say which with [`known`](Self::known); any other
/// value is answered `404` and writes nothing.
///
/// ```no_run
/// use std::time::Duration;
/// use actix_web::{App, HttpResponse, web};
/// use lockman::web::{RequestPermit, RequestPermits};
///
/// async fn export(_permit: RequestPermit) -> HttpResponse {
///     HttpResponse::Ok().finish() // at most 2 exports per tenant run at once, everywhere
/// }
///
/// # fn demo(manager: lockman::LockManager) {
/// const TENANTS: [&str; 2] = ["acme", "globex"];
/// let app = App::new()
///     .app_data(
///         RequestPermits::path(manager, "tenant", 2)
///             .prefix("exports:")
///             .known(|tenant| TENANTS.contains(&tenant)),
///     )
///     .route("/tenants/{tenant}/export", web::post().to(export));
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RequestPermits {
    front: Front,
    permits: Permits,
}

impl RequestPermits {
    /// `permits` per name, the name taken from the path segment `param`.
    pub fn path(manager: LockManager, param: &str, permits: u32) -> Self {
        Self::new(manager, Key::Path(param.to_owned()), permits)
    }

    /// `permits` per name, the name taken from the request header `name`.
    pub fn header(manager: LockManager, name: &str, permits: u32) -> Self {
        Self::new(manager, Key::Header(name.to_owned()), permits)
    }

    fn new(manager: LockManager, key: Key, permits: u32) -> Self {
        Self {
            front: Front::new(manager, key, StatusCode::TOO_MANY_REQUESTS),
            permits: Permits::new(permits),
        }
    }

    admission_builders!(
        "permit",
        "`429 Too Many Requests`; `503 Service Unavailable` is the other usual choice"
    );
}

/// The lock of this request, held while the handler runs. It dereferences to its [`LockGuard`]
/// (name, lost signal, token).
#[must_use = "dropping it releases the lock at once"]
#[derive(Debug)]
pub struct RequestGuard(LockGuard);

impl RequestGuard {
    /// Releases the lock before the handler ends.
    ///
    /// # Errors
    /// As [`LockGuard::release`].
    pub async fn release(self) -> Result<(), LockError> {
        self.0.release().await
    }
}

impl Deref for RequestGuard {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.0
    }
}

impl FromRequest for RequestGuard {
    type Error = RequestLockError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let config = req.app_data::<RequestLock>().cloned();
        let name = config.as_ref().map(|c| c.front.name(req));
        Box::pin(async move {
            let config = config.ok_or_else(RequestLockError::not_configured)?;
            let name = name.ok_or_else(RequestLockError::not_configured)??;
            let front = &config.front;
            match front.admission.lock(&name).await {
                Ok(guard) => Ok(RequestGuard(guard)),
                Err(failure) => Err(front.refusal(name, failure)),
            }
        })
    }
}

/// A permit of this request's semaphore, held while the handler runs (and renewed); given back
/// when the handler is done. It dereferences to its [`PermitGuard`] (lost signal, ids).
#[must_use = "dropping it gives the permit back at once"]
#[derive(Debug)]
pub struct RequestPermit(PermitGuard);

impl RequestPermit {
    /// Gives the permit back before the handler ends.
    ///
    /// # Errors
    /// As [`PermitGuard::release`].
    pub async fn release(self) -> Result<(), LockError> {
        self.0.release().await
    }
}

impl Deref for RequestPermit {
    type Target = PermitGuard;

    fn deref(&self) -> &PermitGuard {
        &self.0
    }
}

impl FromRequest for RequestPermit {
    type Error = RequestLockError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let config = req.app_data::<RequestPermits>().cloned();
        let name = config.as_ref().map(|c| c.front.name(req));
        Box::pin(async move {
            let config = config.ok_or_else(RequestLockError::not_configured)?;
            let name = name.ok_or_else(RequestLockError::not_configured)??;
            let front = &config.front;
            match front.admission.permit(&name, &config.permits).await {
                Ok(guard) => Ok(RequestPermit(guard)),
                Err(failure) => Err(front.refusal(name, failure)),
            }
        })
    }
}

/// Why a request did not get its lock or permit; each is an HTTP answer ([`ResponseError`]),
/// whose body is a fixed text (see the module's docs); this error's `Display` has the detail
/// (the name, the [`LockError`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestLockError {
    /// No [`RequestLock`] (or [`RequestPermits`]) in `app_data` for this route: `500`.
    #[error("no lockman::web::RequestLock or RequestPermits is configured for this route")]
    NotConfigured,
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
    /// The `known` hook ([`RequestLock::known`], [`RequestPermits::known`]) refused the
    /// request's value: `404`.
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
    /// lockman failed: `503` with `Retry-After` when the error is retryable (Redis away),
    /// `500` otherwise.
    #[error("lock unavailable: {source}")]
    Lock {
        /// What lockman said.
        source: LockError,
        /// `Retry-After`, in seconds, for a retryable error.
        retry_after: u64,
    },
}

impl RequestLockError {
    fn not_configured() -> Self {
        tracing::error!(
            "request answered 500: no lockman::web::RequestLock or RequestPermits in app_data"
        );
        Self::NotConfigured
    }

    /// The answer's body: never the request's value, never a [`LockError`]'s text.
    fn body(&self) -> String {
        match self {
            Self::NoKey(_) => self.to_string(),
            Self::Refused { reason, .. } => admission::refused_text(reason),
            Self::Unknown { .. } => admission::UNKNOWN.to_owned(),
            Self::Busy { .. } => admission::BUSY.to_owned(),
            Self::NotConfigured | Self::Lock { .. } => admission::UNAVAILABLE.to_owned(),
        }
    }
}

impl ResponseError for RequestLockError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::NotConfigured => StatusCode::INTERNAL_SERVER_ERROR,
            Self::NoKey(_) | Self::Refused { .. } => StatusCode::BAD_REQUEST,
            Self::Unknown { .. } => StatusCode::NOT_FOUND,
            Self::Busy { status, .. } => *status,
            Self::Lock { source, .. } if source.is_retryable() => StatusCode::SERVICE_UNAVAILABLE,
            Self::Lock { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        response.insert_header((CONTENT_TYPE, "text/plain; charset=utf-8"));
        response.insert_header((X_CONTENT_TYPE_OPTIONS, "nosniff"));
        match self {
            Self::Busy { retry_after, .. } => {
                response.insert_header((RETRY_AFTER, retry_after.to_string()));
            }
            Self::Lock {
                source,
                retry_after,
            } if source.is_retryable() => {
                response.insert_header((RETRY_AFTER, retry_after.to_string()));
            }
            _ => {}
        }
        response.body(self.body())
    }
}
