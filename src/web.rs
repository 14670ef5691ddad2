//! actix-web integration (the `actix-web` feature): hold a lock for the duration of a request.
//!
//! Put a [`RequestLock`] in the `app_data` of an `App`, a scope or a resource, saying which path
//! segment or header names the lock, and take a [`RequestGuard`] as a handler argument: the
//! handler runs only once the lock is held, and the lock is released when the handler is done
//! (the guard is dropped with the handler's arguments), or earlier with
//! [`RequestGuard::release`]. A request that cannot have the lock within the wait gets `409
//! Conflict` (or the status you choose, e.g. `503`) with `Retry-After`, and the handler never runs.
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
use actix_web::http::header::RETRY_AFTER;
use actix_web::{FromRequest, HttpRequest, HttpResponse, ResponseError};

use crate::{LockError, LockGuard, LockManager};

/// Where a request's lock name comes from.
#[derive(Clone, Debug)]
enum Key {
    Path(String),
    Header(String),
}

/// How requests take their lock: which part of the request names it, how long to wait, and what
/// to answer when it is busy. Put it in `app_data`; [`RequestGuard`] reads it.
#[derive(Clone, Debug)]
pub struct RequestLock {
    manager: LockManager,
    key: Key,
    prefix: String,
    wait: Duration,
    busy: StatusCode,
    retry_after: Duration,
}

impl RequestLock {
    fn new(manager: LockManager, key: Key) -> Self {
        Self {
            manager,
            key,
            prefix: String::new(),
            wait: Duration::from_secs(1),
            busy: StatusCode::CONFLICT,
            retry_after: Duration::from_secs(1),
        }
    }

    /// The lock is named by the path segment `param` (as in `/accounts/{account}`).
    pub fn path(manager: LockManager, param: &str) -> Self {
        Self::new(manager, Key::Path(param.to_owned()))
    }

    /// The lock is named by the request header `name`.
    pub fn header(manager: LockManager, name: &str) -> Self {
        Self::new(manager, Key::Header(name.to_owned()))
    }

    /// Prepended to the segment or header value to make the lock name (e.g. `account:`).
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_owned();
        self
    }

    /// How long a request waits for its lock. Default: 1 s.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The status of a request whose lock stayed busy: `409 Conflict` by default; `503 Service
    /// Unavailable` is the other usual choice.
    pub fn busy_status(mut self, status: StatusCode) -> Self {
        self.busy = status;
        self
    }

    /// The `Retry-After` of a busy answer, in whole seconds (at least 1). Default: 1 s.
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = after;
        self
    }

    fn name(&self, req: &HttpRequest) -> Result<String, RequestLockError> {
        let value = match &self.key {
            Key::Path(param) => req.match_info().get(param).map(str::to_owned),
            Key::Header(name) => req
                .headers()
                .get(name.as_str())
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        };
        match value.filter(|v| !v.is_empty()) {
            Some(v) => Ok(format!("{}{v}", self.prefix)),
            None => Err(RequestLockError::NoKey(match &self.key {
                Key::Path(p) => format!("path segment {p:?}"),
                Key::Header(h) => format!("header {h:?}"),
            })),
        }
    }

    fn retry_after_secs(&self) -> u64 {
        self.retry_after.as_secs_f64().ceil().max(1.0) as u64
    }
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
        let name = config.as_ref().map(|c| c.name(req));
        Box::pin(async move {
            let config = config.ok_or(RequestLockError::NotConfigured)?;
            let name = name.ok_or(RequestLockError::NotConfigured)??;
            let lock = config.manager.lock(name.as_str());
            match lock.try_acquire_for(config.wait).await {
                Ok(Some(guard)) => Ok(RequestGuard(guard)),
                Ok(None) => Err(RequestLockError::Busy {
                    name,
                    status: config.busy,
                    retry_after: config.retry_after_secs(),
                }),
                Err(e) => Err(RequestLockError::Lock {
                    retry_after: config.retry_after_secs(),
                    source: e,
                }),
            }
        })
    }
}

/// Why a request did not get its lock; each is an HTTP answer ([`ResponseError`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestLockError {
    /// No [`RequestLock`] in `app_data` for this route: `500`.
    #[error("no lockman::web::RequestLock is configured for this route")]
    NotConfigured,
    /// The request lacks what names its lock: `400`.
    #[error("the request has no {0} to name its lock")]
    NoKey(String),
    /// The lock stayed busy for the whole wait: the configured status (`409` by default), with
    /// `Retry-After`.
    #[error("lock {name:?} is busy; retry later")]
    Busy {
        /// The lock name.
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

impl ResponseError for RequestLockError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::NotConfigured => StatusCode::INTERNAL_SERVER_ERROR,
            Self::NoKey(_) => StatusCode::BAD_REQUEST,
            Self::Busy { status, .. } => *status,
            Self::Lock { source, .. } if source.is_retryable() => StatusCode::SERVICE_UNAVAILABLE,
            Self::Lock { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
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
        response.body(self.to_string())
    }
}
