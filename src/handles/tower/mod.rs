//! tower integration (the `tower` feature): hold a lock, or a semaphore's permit, for each request
//! of an axum, tonic or any tower HTTP service, as `lockman::web` does for actix-web.
//!
//! A [`LockLayer`] says which part of a request names its lock (a path segment, a header, or a
//! closure over the request's head), how long to wait, and what to answer when the lock stays
//! busy. The wrapped service is called only once the lock is held; a request that cannot have it
//! within the wait gets `409 Conflict` (or the status you choose, e.g. `503`) with `Retry-After`,
//! and the inner service never sees it. [`PermitLayer`] does the same with a permit semaphore per
//! name: at most N requests per name run at once across every instance, the others get `429 Too
//! Many Requests` (or `503`) with `Retry-After`.
//!
//! **How long the lock is held**: until the response's body has been sent (its last frame read),
//! or dropped unsent (a client gone, a cancelled request). A streaming body is thus sent under
//! the lock too, where actix-web's extractor releases when the handler returns. A request whose
//! future is dropped while it waits for its lock gives up its wait. The inner service finds the
//! guard in the request's extensions, as a [`LockHeld`] or a [`PermitHeld`] (axum:
//! `Extension<LockHeld>`), for its name, lost signal and deadline.
//!
//! What a refused request gets (the status, a `Retry-After` for the retryable ones, and a one-line
//! `text/plain; charset=utf-8` body with `X-Content-Type-Options: nosniff`) is the same as with
//! `lockman::web`:
//!
//! | why | status | body |
//! |---|---|---|
//! | the request has no value to name its lock (segment or header missing or empty, the closure said `None` or `""`) | `400` | `the request has no path segment 1 to name its lock` |
//! | the value holds `{` or `}`, or (without a prefix) starts with `redisson_` or `lockman_` | `400` | `the request's lock name is refused: …` (the rule, not the value) |
//! | the [`known`](LockLayer::known) hook said `false` | `404` | `not found` |
//! | the lock stayed busy for the whole wait | `409` (lock) or `429` (permit), or [`busy_status`](LockLayer::busy_status); `Retry-After` | `busy; retry later` |
//! | lockman failed and may succeed later (Redis away) | `503`, `Retry-After` | `lock service unavailable` |
//! | lockman failed otherwise | `500` | `lock service unavailable` |
//!
//! No body repeats the request's value, and none carries a [`LockError`](crate::LockError)'s text
//! (which can name the Redis host, its user or a key): a `500` or `503` is logged (`tracing`, at
//! `error` or `warn`, with the lock name and the error), and the response carries its [`Refusal`]
//! in its extensions for an outer layer that wants the detail
//! (`response.extensions().get::<Refusal>()`).
//!
//! The refusal is a response, not an error of the service: the layer keeps the inner service's
//! error type, and axum's `Router::layer` / `route_layer` and tonic's `Server::builder().layer`
//! take it as is. Under tonic a refusal is an HTTP status, not a gRPC one: gRPC clients map it as
//! the gRPC spec says (`429` and `503` to `UNAVAILABLE`, `409` to `UNKNOWN`, `400` to
//! `INTERNAL`, `404` to `UNIMPLEMENTED`); a path segment there is `1` for the method of `/package.Service/Method`.
//!
//! ```no_run
//! use std::time::Duration;
//! use axum::{Router, routing::post};
//! use lockman::tower::LockLayer;
//!
//! async fn deposit() -> &'static str {
//!     // ... read, change and write the account: no other request on it runs meanwhile ...
//!     "ok"
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let manager = lockman::LockManager::connect("redis://127.0.0.1:6379/0").await?;
//! let app: Router = Router::new()
//!     .route("/accounts/{account}/deposit", post(deposit))
//!     // The lock of `/accounts/alice/deposit` is `account:alice`: segment 1 of the path.
//!     .route_layer(
//!         LockLayer::segment(manager, 1)
//!             .prefix("account:")
//!             .wait(Duration::from_millis(200)),
//!     );
//! # Ok(()) }
//! ```
//!
//! **Path segments** are counted in the path the layer sees, from 0, as the router counts them:
//! in `/accounts/alice/deposit`, `accounts` is 0 and `alice` is 1 (in axum, a router nested under
//! a prefix sees the path without it). An empty segment counts (in `/t//alice/pay`, 1 is empty
//! and `alice` is 2, as for a route `/t/{tenant}/{account}/pay`); an empty value is refused
//! with `400`. Use [`LockLayer::with`] for anything else, such as a query
//! parameter or an extension an earlier layer set.
//!
//! **The lock is named by the value the handler sees.** A segment is percent-decoded as axum's
//! `Path` decodes it: every `%XX` (`%2F`, `%25` and `%2B` too; `+` stays `+`), bytes that are not
//! UTF-8 replaced by U+FFFD. So `/accounts/alice/deposit` and `/accounts/%61lice/deposit`, which
//! both run the handler for `alice`, take the one lock `account:alice`. Nothing else is changed:
//! `Alice` and `alice`, a Unicode string and its normalised form, `007` and `7` are different
//! locks. When the handler treats such values as one account, give the layer the same rule with
//! [`canonical`](LockLayer::canonical) (`.canonical(|v| v.to_lowercase())`), or name the lock
//! yourself with [`LockLayer::with`]: a lock protects a handler only if both agree on the name.
//! A header's value is taken as it is (visible ASCII, not decoded).
//!
//! **Names from requests**: a client chooses them, so give every layer a
//! [`prefix`](LockLayer::prefix) (`account:`), which keeps them apart from other names and from
//! Redisson's and lockman's own keys. The layer refuses (`400`) a value holding `{` or `}` (lock
//! `x` and lock `{x}` share their derived keys) and, without a prefix, one that starts with
//! `redisson_` or `lockman_`.
//!
//! **A [`PermitLayer`] leaves a key in Redis for every name it sees**, for good: a permit
//! semaphore's count is a string key without expiry (Redisson's layout), written the first time
//! a name is used. Its names must come from a **bounded** set (tenant ids an earlier layer
//! authenticated, a fixed list), never from free client input, or any client can fill Redis
//! (and under `noeviction` stop every lock). Give it a [`known`](PermitLayer::known) hook that
//! says which values exist: the others are answered `404` before anything is written.

mod body;
mod refusal;

pub use body::{Guarded, LockHeld, PermitHeld};
pub use refusal::Refusal;

use body::Held;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::HeaderName;
use http::request::Parts;
use http::{Request, Response, StatusCode};

use crate::handles::admission::{self, Admission, Failure, Permits, Unnamed};
use crate::handles::manager::LockManager;

/// A closure that names a request's lock from its head.
type Namer = dyn Fn(&Parts) -> Option<String> + Send + Sync;

/// Where a request's lock name comes from.
#[derive(Clone)]
enum Key {
    /// The path segment at this index (from 0, empty ones counted, as the router counts them).
    Segment(usize),
    Header(HeaderName),
    With(Arc<Namer>),
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Segment(i) => write!(f, "Segment({i})"),
            Self::Header(h) => write!(f, "Header({h:?})"),
            Self::With(_) => f.write_str("With(..)"),
        }
    }
}

impl Key {
    /// What a request lacks when it has no value: for the `400`'s text.
    fn describe(&self) -> String {
        match self {
            Self::Segment(i) => format!("path segment {i}"),
            Self::Header(h) => format!("header {:?}", h.as_str()),
            Self::With(_) => "value (the naming closure found none)".to_owned(),
        }
    }

    fn value(&self, head: &Parts) -> Option<String> {
        match self {
            // Split before decoding: an encoded `/` (`%2F`) is part of its segment, as for the
            // router, and decoded as the handler's `Path` decodes it.
            // Counted as the router counts them: an empty segment (`/t//alice`) is one, since
            // a route's parameter matches it (skipping it would name the lock by the next
            // segment while the handler sees this one's neighbour).
            Self::Segment(i) => head
                .uri
                .path()
                .strip_prefix('/')
                .unwrap_or(head.uri.path())
                .split('/')
                .nth(*i)
                .map(admission::percent_decoded),
            Self::Header(name) => head
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            Self::With(f) => f(head),
        }
    }
}

/// The lock or the permits a layer takes.
#[derive(Clone, Debug)]
enum Gate {
    Lock,
    Permits(Permits),
}

/// What every service of a layer shares: which part of a request names the lock, the lock or
/// the permits it takes, what to answer when it stays busy, and the [`Admission`] (name rules,
/// wait, `Retry-After`) that `lockman::web` shares.
#[derive(Clone, Debug)]
struct Front {
    key: Key,
    gate: Gate,
    busy: StatusCode,
    admission: Admission,
}

impl Front {
    fn new(manager: LockManager, key: Key, gate: Gate) -> Self {
        let busy = match gate {
            Gate::Lock => StatusCode::CONFLICT,
            Gate::Permits(_) => StatusCode::TOO_MANY_REQUESTS,
        };
        Self {
            key,
            gate,
            busy,
            admission: Admission::new(manager),
        }
    }

    fn name(&self, head: &Parts) -> Result<String, Refusal> {
        self.admission
            .naming
            .name(self.key.value(head))
            .map_err(|unnamed| match unnamed {
                Unnamed::Missing => Refusal::NoKey(self.key.describe()),
                Unnamed::Refused { value, reason } => Refusal::Refused { value, reason },
                Unnamed::Unknown { value } => Refusal::Unknown { value },
            })
    }

    /// Takes the lock or a permit of `name`, waiting up to the configured time.
    async fn admit(&self, name: String) -> Result<Held, Refusal> {
        let outcome = match &self.gate {
            Gate::Lock => self
                .admission
                .lock(&name)
                .await
                .map(|g| Held::Lock(Arc::new(g))),
            Gate::Permits(permits) => self
                .admission
                .permit(&name, permits)
                .await
                .map(|g| Held::Permit(Arc::new(g))),
        };
        let retry_after = self.admission.retry_after_secs();
        outcome.map_err(|failure| match failure {
            Failure::Busy => Refusal::Busy {
                name,
                status: self.busy,
                retry_after,
            },
            Failure::Lock(source) => Refusal::Lock {
                source,
                retry_after,
            },
        })
    }
}

/// The builder methods of a layer, which holds its [`Front`] in `front` (built, not yet shared: a
/// layer's services share it once the layer is applied).
macro_rules! admission_builders {
    ($what:literal, $busy:literal) => {
        #[doc = concat!("Prepended to the segment, header or closure value to make the ", $what, " name (e.g. `account:`). ")]
        /// Set one whenever names come from requests (see the module's docs).
        pub fn prefix(mut self, prefix: &str) -> Self {
            self.edit().admission.naming.prefix = prefix.to_owned();
            self
        }

        /// The canonical form of a request's value, applied first (before the checks, the
        /// [`known`](Self::known) hook and the prefix): e.g. `|v| v.to_lowercase()` when the
        /// handler treats `Alice` and `alice` as one. An empty result is answered `400`.
        pub fn canonical<F>(mut self, canonical: F) -> Self
        where
            F: Fn(&str) -> String + Send + Sync + 'static,
        {
            self.edit().admission.naming.canonical = Some(Arc::new(canonical));
            self
        }

        /// Which values exist: a request whose (canonical) value `known` refuses is answered
        /// `404 Not Found` before anything is written to Redis or the inner service is called.
        /// It is called on the request's task, once per request: keep it quick (a set lookup).
        pub fn known<F>(mut self, known: F) -> Self
        where
            F: Fn(&str) -> bool + Send + Sync + 'static,
        {
            self.edit().admission.naming.known = Some(Arc::new(known));
            self
        }

        #[doc = concat!("How long a request waits for its ", $what, ". Default: 1 s.")]
        pub fn wait(mut self, wait: Duration) -> Self {
            self.edit().admission.wait = wait;
            self
        }

        #[doc = concat!("The status of a request whose ", $what, " stayed busy: ", $busy, " by default.")]
        pub fn busy_status(mut self, status: StatusCode) -> Self {
            self.edit().busy = status;
            self
        }

        /// The `Retry-After` of a busy (or retryable failure's) answer, in whole seconds (at
        /// least 1). Default: 1 s.
        pub fn retry_after(mut self, after: Duration) -> Self {
            self.edit().admission.retry_after = after;
            self
        }
    };
}

/// A tower [`Layer`](::tower::Layer) that holds a lock per request, named by a path segment, a
/// header or a closure, until the response's body is sent. Its services answer a request that
/// cannot have the lock within the wait with `409 Conflict` (or
/// [`busy_status`](Self::busy_status)) and `Retry-After`, without calling the inner service.
#[derive(Clone, Debug)]
pub struct LockLayer {
    front: Arc<Front>,
}

impl LockLayer {
    /// The lock is named by the path segment at `index`, counted from 0 as the router counts
    /// them, empty ones too (`/accounts/alice/deposit`: `alice` is 1; `/t//alice/pay`: `alice`
    /// is 2), percent-decoded as axum's `Path` decodes it (`%61lice` is `alice`; see the
    /// module's docs).
    pub fn segment(manager: LockManager, index: usize) -> Self {
        Self::new(manager, Key::Segment(index))
    }

    /// The lock is named by the request header `name` (a value that is not visible ASCII counts
    /// as missing).
    pub fn header(manager: LockManager, name: HeaderName) -> Self {
        Self::new(manager, Key::Header(name))
    }

    /// The lock is named by what `name` returns for the request's head (method, URI, headers,
    /// extensions); `None` or `""` is answered `400`. The value is used as returned (decode it
    /// as the handler does), then checked and prefixed as a segment's is (see the module's
    /// docs).
    pub fn with<F>(manager: LockManager, name: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        Self::new(manager, Key::With(Arc::new(name)))
    }

    fn new(manager: LockManager, key: Key) -> Self {
        let front = Arc::new(Front::new(manager, key, Gate::Lock));
        Self { front }
    }

    /// The front being built; a layer cloned before a builder call is given its own copy.
    fn edit(&mut self) -> &mut Front {
        Arc::make_mut(&mut self.front)
    }

    admission_builders!(
        "lock",
        "`409 Conflict`; `503 Service Unavailable` is the other usual choice"
    );
}

/// A tower [`Layer`](::tower::Layer) that holds a permit of a permit semaphore per request: at
/// most `permits` requests per name at once, across every instance of the service (a
/// [`PermitSemaphore`](crate::PermitSemaphore) per name, whose permits the watchdog renews, so
/// an instance that dies gives its permits back). The others get `429 Too Many Requests` (or
/// [`busy_status`](Self::busy_status)) with `Retry-After`.
///
/// **Each name leaves a key in Redis that never expires** (the semaphore's count, Redisson's
/// layout): names must come from a bounded set. Say which with [`known`](Self::known); any other
/// value is answered `404` and writes nothing.
///
/// ```no_run
/// use axum::{Router, routing::post};
/// use lockman::tower::PermitLayer;
///
/// # fn demo(manager: lockman::LockManager) {
/// const TENANTS: [&str; 2] = ["acme", "globex"];
/// let app: Router = Router::new()
///     .route("/tenants/{tenant}/export", post(|| async { "exported" }))
///     // At most 2 exports per tenant run at once, everywhere; only known tenants get a key.
///     .route_layer(
///         PermitLayer::segment(manager, 1, 2)
///             .prefix("exports:")
///             .known(|tenant| TENANTS.contains(&tenant)),
///     );
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct PermitLayer {
    front: Arc<Front>,
}

impl PermitLayer {
    /// `permits` per name, the name taken from the path segment at `index` (as
    /// [`LockLayer::segment`]).
    pub fn segment(manager: LockManager, index: usize, permits: u32) -> Self {
        Self::new(manager, Key::Segment(index), permits)
    }

    /// `permits` per name, the name taken from the request header `name`.
    pub fn header(manager: LockManager, name: HeaderName, permits: u32) -> Self {
        Self::new(manager, Key::Header(name), permits)
    }

    /// `permits` per name, the name returned by `name` for the request's head (as
    /// [`LockLayer::with`]).
    pub fn with<F>(manager: LockManager, name: F, permits: u32) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        Self::new(manager, Key::With(Arc::new(name)), permits)
    }

    fn new(manager: LockManager, key: Key, permits: u32) -> Self {
        let gate = Gate::Permits(Permits::new(permits));
        let front = Arc::new(Front::new(manager, key, gate));
        Self { front }
    }

    /// The front being built; a layer cloned before a builder call is given its own copy.
    fn edit(&mut self) -> &mut Front {
        Arc::make_mut(&mut self.front)
    }

    admission_builders!(
        "permit",
        "`429 Too Many Requests`; `503 Service Unavailable` is the other usual choice"
    );
}

impl<S> ::tower::Layer<S> for LockLayer {
    type Service = Admit<S>;

    fn layer(&self, inner: S) -> Admit<S> {
        Admit {
            inner,
            front: self.front.clone(),
        }
    }
}

impl<S> ::tower::Layer<S> for PermitLayer {
    type Service = Admit<S>;

    fn layer(&self, inner: S) -> Admit<S> {
        Admit {
            inner,
            front: self.front.clone(),
        }
    }
}

/// The service of a [`LockLayer`] or a [`PermitLayer`]: calls `S` with each request once the
/// request's lock or permit is held, and holds it until the response's body is sent.
#[derive(Clone, Debug)]
pub struct Admit<S> {
    inner: S,
    front: Arc<Front>,
}

impl<S, ReqBody, ResBody> ::tower::Service<Request<ReqBody>> for Admit<S>
where
    S: ::tower::Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
{
    type Response = Response<Guarded<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The service made ready by `poll_ready` is the one to call; a clone stays for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let front = self.front.clone();
        let (head, body) = req.into_parts();
        let name = front.name(&head);
        let mut req = Request::from_parts(head, body);
        Box::pin(async move {
            let held = match name {
                Ok(name) => front.admit(name).await,
                Err(refusal) => Err(refusal),
            };
            match held {
                Ok(held) => {
                    held.lend(&mut req);
                    let response = inner.call(req).await?;
                    Ok(response.map(|body| Guarded::holding(body, held)))
                }
                Err(refusal) => Ok(refusal.response()),
            }
        })
    }
}
