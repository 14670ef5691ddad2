//! The tower layers (`lockman::tower`) under axum, over real HTTP on loopback ports and a
//! throwaway redis-server: a lock per request excludes exactly (an in-handler overlap counter
//! over many concurrent requests), is held until a streamed body has been sent, and answers a
//! busy lock or permit with its status and `Retry-After` after the configured wait; two routers
//! with two managers share a permit semaphore; requests that do not name a lock are answered
//! `400`; every spelling of a value takes the lock of the value the handler sees; names from
//! requests are checked before anything is written; refusals show neither the request's value
//! nor lockman's error. Run with `cargo test --features tower --test tower`.
#![cfg(feature = "tower")]

mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderName, StatusCode};
use axum::routing::{get, post};
use bytes::Bytes;
use lockman::LockManager;
use lockman::tower::{LockHeld, LockLayer, PermitHeld, PermitLayer, Refusal};
use support::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How many requests are inside a handler now, and the most seen at once.
#[derive(Clone, Default)]
struct Overlap {
    inside: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    done: Arc<AtomicUsize>,
}

impl Overlap {
    /// A handler that stays inside for `work`, counted.
    async fn work(self, work: Duration) -> &'static str {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        // The work itself, during which an unexcluded request would enter: not an ordering wait.
        tokio::time::sleep(work).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
        self.done.fetch_add(1, Ordering::SeqCst);
        "done"
    }

    fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }

    fn done(&self) -> usize {
        self.done.load(Ordering::SeqCst)
    }
}

/// Serves `app` on a free loopback port; returns the port.
async fn serve(app: Router) -> u16 {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

/// An HTTP/1.1 response as read off the wire.
struct Answer {
    status: u16,
    /// The head, lower-cased.
    head: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            l.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(':'))
                .map(str::trim)
        })
    }
}

/// Sends a request on its own connection and returns the connection, the request written.
async fn send(port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("Content-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

/// Reads a whole response (the server closes the connection after it).
async fn read(mut stream: TcpStream) -> Answer {
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .expect("a response within 30 s")
        .unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        head: head.to_ascii_lowercase(),
        body: body.to_owned(),
    }
}

async fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    read(send(port, method, path, headers).await).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lock_per_request_excludes_every_other_request_on_its_name() {
    let redis = RedisServer::start();
    let manager = LockManager::connect(&redis.url()).await.unwrap();
    let alice = Overlap::default();
    let bob = Overlap::default();
    let app = Router::new()
        .route(
            "/accounts/{account}/deposit",
            post({
                let (alice, bob) = (alice.clone(), bob.clone());
                move |axum::extract::Path(account): axum::extract::Path<String>,
                      axum::Extension(held): axum::Extension<LockHeld>| {
                    let counter = if account == "alice" { alice } else { bob };
                    async move {
                        // The handler sees the lock it runs under.
                        assert_eq!(held.name(), format!("account:{account}"));
                        assert!(!held.is_lost());
                        counter.work(Duration::from_millis(5)).await
                    }
                }
            }),
        )
        .route_layer(
            LockLayer::segment(manager.clone(), 1)
                .prefix("account:")
                .wait(Duration::from_secs(30)),
        );
    let port = serve(app).await;

    const EACH: usize = 40;
    let requests = (0..2 * EACH).map(|i| {
        let account = if i % 2 == 0 { "alice" } else { "bob" };
        tokio::spawn(async move {
            http(port, "POST", &format!("/accounts/{account}/deposit"), &[]).await
        })
    });
    for answer in futures_util::future::join_all(requests).await {
        let answer = answer.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    assert_eq!((alice.done(), bob.done()), (EACH, EACH));
    // One request at a time per account: every overlap would have been counted.
    assert_eq!(alice.most(), 1, "two alice deposits ran at once");
    assert_eq!(bob.most(), 1, "two bob deposits ran at once");
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_streamed_body_is_sent_under_the_lock() {
    let redis = RedisServer::start();
    let manager = LockManager::connect(&redis.url()).await.unwrap();
    // The handler returns at once with a body whose second chunk waits for `finish`.
    let finish = Arc::new(tokio::sync::Notify::new());
    let calls = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route(
            "/report/{name}",
            get({
                let (finish, calls) = (finish.clone(), calls.clone());
                move || async move {
                    let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
                    let chunks = futures_util::stream::unfold(0, move |n| {
                        let finish = finish.clone();
                        async move {
                            match n {
                                0 => Some((Ok::<_, Infallible>(Bytes::from("first-chunk;")), 1)),
                                1 if first => {
                                    finish.notified().await;
                                    Some((Ok(Bytes::from("last-chunk")), 2))
                                }
                                _ => None,
                            }
                        }
                    });
                    Body::from_stream(chunks)
                }
            }),
        )
        .route_layer(LockLayer::segment(manager.clone(), 1).wait(Duration::from_millis(300)));
    // The same lock names, with a wait long enough for a release on its way.
    let patient = Router::new()
        .route("/patient/{name}", get(|| async { "done" }))
        .route_layer(LockLayer::segment(manager.clone(), 1).wait(Duration::from_secs(30)));
    let port = serve(app.merge(patient)).await;

    let mut streaming = send(port, "GET", "/report/r1", &[]).await;
    // Read until the first chunk is out: the handler has returned, the body is being sent.
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("first-chunk;") {
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(30), streaming.read(&mut buf))
            .await
            .expect("the first chunk within 30 s")
            .unwrap();
        assert!(n > 0, "the connection closed before the first chunk");
        seen.extend_from_slice(&buf[..n]);
    }
    // The body is not done: the lock is still held, so another request waits, then is refused.
    let busy = http(port, "GET", "/report/r1", &[]).await;
    assert_eq!(busy.status, 409, "{}", busy.body);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the refused request ran");

    finish.notify_one();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), streaming.read_to_end(&mut rest))
        .await
        .expect("the rest of the body within 30 s")
        .unwrap();
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("last-chunk"), "{rest}");
    // The body is sent: the lock is free again.
    let after = http(port, "GET", "/patient/r1", &[]).await;
    assert_eq!(after.status, 200, "{}", after.body);
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_busy_lock_or_permit_is_answered_with_its_status_and_retry_after_after_the_wait() {
    let redis = RedisServer::start();
    let manager = LockManager::connect(&redis.url()).await.unwrap();
    let ran = Overlap::default();
    let wait = Duration::from_millis(400);
    let handler = {
        let ran = ran.clone();
        move || ran.clone().work(Duration::ZERO)
    };
    let app = Router::new()
        .route("/locked/{name}", post(handler.clone()))
        .route_layer(
            LockLayer::segment(manager.clone(), 1)
                .wait(wait)
                .retry_after(Duration::from_millis(1500)),
        )
        .merge(
            Router::new()
                .route("/unavailable/{name}", post(handler.clone()))
                .route_layer(
                    LockLayer::segment(manager.clone(), 1)
                        .wait(wait)
                        .busy_status(StatusCode::SERVICE_UNAVAILABLE),
                ),
        )
        .merge(
            Router::new()
                .route("/limited/{name}", post(handler))
                .route_layer(PermitLayer::segment(manager.clone(), 1, 1).wait(wait)),
        );
    let port = serve(app).await;

    // Another holder, outside the server: the lock `busy` and the only permit of `few`.
    let holder = LockManager::connect(&redis.url()).await.unwrap();
    let _lock = holder.lock("busy").acquire().await.unwrap();
    let few = holder.permit_semaphore("few");
    assert!(few.try_set_permits(1).await.unwrap());
    let _permit = few.acquire(1).await.unwrap();

    for (path, status, retry_after) in [
        ("/locked/busy", 409, "2"),
        ("/unavailable/busy", 503, "1"),
        ("/limited/few", 429, "1"),
    ] {
        let started = Instant::now();
        let answer = http(port, "POST", path, &[]).await;
        let took = started.elapsed();
        assert_eq!(answer.status, status, "{path}: {}", answer.body);
        assert_eq!(answer.header("retry-after"), Some(retry_after), "{path}");
        assert!(
            took >= wait,
            "{path} answered after {took:?}, before the wait"
        );
        assert_eq!(answer.body, "busy; retry later", "{path}");
    }
    assert_eq!(ran.done(), 0, "a refused request reached its handler");

    // Free names go through at once.
    for path in ["/locked/free", "/unavailable/free", "/limited/free"] {
        let answer = http(port, "POST", path, &[]).await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    }
    assert_eq!(ran.done(), 3);
    holder.shutdown().await;
    manager.shutdown().await;
}

/// A busy permit behind a replica slow to acknowledge (frozen through the whole wait, so every
/// attempt's `WAIT` takes the whole sync timeout): the manager's replica sync allows that time,
/// so the request is busy (`429`) at the end of its wait, not `503`. Breaks it: the layer's
/// wait bounded by the wait plus the 250 ms margin alone, while the semaphore's last attempt
/// may take the 800 ms sync timeout (`503`, cause "a permit semaphore's answer" timed out).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_busy_permit_with_a_slow_replica_is_busy_not_unavailable() {
    let (primary, replica) = support::primary_and_replica();
    let sync = Duration::from_millis(800);
    let manager = LockManager::start(lockman::Config::new(primary.url()).sync_replicas(1, sync))
        .await
        .unwrap();
    let wait = Duration::from_secs(2);
    let ran = Overlap::default();
    let handler = {
        let ran = ran.clone();
        move || ran.clone().work(Duration::ZERO)
    };
    let app = Router::new()
        .route("/limited/{name}", post(handler))
        .route_layer(PermitLayer::segment(manager.clone(), 1, 1).wait(wait));
    let port = serve(app).await;
    // Another holder, outside the server, has the only permit of `few`.
    let holder = LockManager::connect(&primary.url()).await.unwrap();
    let few = holder.permit_semaphore("few");
    assert!(few.try_set_permits(1).await.unwrap());
    let permit = few.acquire(1).await.unwrap();
    replica.pause(Duration::from_secs(8)).unwrap();
    let started = Instant::now();
    let answer = http(port, "POST", "/limited/few", &[]).await;
    let took = started.elapsed();
    replica.resume().unwrap();
    assert_eq!(
        answer.status, 429,
        "a holder, not an outage: {}",
        answer.body
    );
    assert!(took >= wait, "{took:?}");
    assert!(
        took < wait + sync + Duration::from_millis(2_250),
        "{took:?}"
    );
    assert_eq!(ran.done(), 0, "a refused request reached its handler");
    drop(permit);
    holder.shutdown().await;
    let _ = tokio::time::timeout(Duration::from_secs(5), manager.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_routers_with_two_managers_share_a_permit_semaphore() {
    let redis = RedisServer::start();
    const PERMITS: u32 = 2;
    // One counter over both routers: only the semaphore in Redis coordinates them.
    let overlap = Overlap::default();
    let mut ports = Vec::new();
    let mut managers = Vec::new();
    for _ in 0..2 {
        let manager = LockManager::connect(&redis.url()).await.unwrap();
        let app = Router::new()
            .route(
                "/tenants/{tenant}/export",
                post({
                    let overlap = overlap.clone();
                    move |axum::Extension(held): axum::Extension<PermitHeld>| {
                        assert_eq!(held.name(), "exports:acme");
                        overlap.clone().work(Duration::from_millis(50))
                    }
                }),
            )
            .route_layer(
                PermitLayer::segment(manager.clone(), 1, PERMITS)
                    .prefix("exports:")
                    .wait(Duration::from_secs(30)),
            );
        ports.push(serve(app).await);
        managers.push(manager);
    }

    const REQUESTS: usize = 30;
    let requests = (0..REQUESTS).map(|i| {
        let port = ports[i % 2];
        tokio::spawn(async move { http(port, "POST", "/tenants/acme/export", &[]).await })
    });
    for answer in futures_util::future::join_all(requests).await {
        let answer = answer.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    assert_eq!(overlap.done(), REQUESTS);
    assert!(
        overlap.most() <= PERMITS as usize,
        "{} exports ran at once with {PERMITS} permits",
        overlap.most()
    );
    // The permits were used: more than one export ran at once.
    assert_eq!(overlap.most(), PERMITS as usize);
    for manager in managers {
        manager.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_names_no_lock_is_answered_400_and_never_runs() {
    let redis = RedisServer::start();
    let manager = LockManager::connect(&redis.url()).await.unwrap();
    let ran = Overlap::default();
    let handler = {
        let ran = ran.clone();
        move || ran.clone().work(Duration::ZERO)
    };
    let app = Router::new()
        .route("/by-header", post(handler.clone()))
        .route_layer(LockLayer::header(
            manager.clone(),
            HeaderName::from_static("x-account"),
        ))
        .merge(
            Router::new()
                .route("/by-closure", post(handler.clone()))
                .route_layer(LockLayer::with(manager.clone(), |head| {
                    // The query string names the lock: `?account=…`.
                    head.uri
                        .query()
                        .and_then(|q| q.strip_prefix("account="))
                        .map(str::to_owned)
                })),
        )
        .merge(
            Router::new()
                .route("/short", post(handler))
                .route_layer(PermitLayer::segment(manager.clone(), 3, 1)),
        );
    let port = serve(app).await;

    for (path, headers, says) in [
        (
            "/by-header",
            &[][..],
            "the request has no header \"x-account\" to name its lock",
        ),
        (
            "/by-header",
            &[("x-account", "")][..],
            "the request has no header \"x-account\" to name its lock",
        ),
        (
            "/by-closure",
            &[][..],
            "the request has no value (the naming closure found none) to name its lock",
        ),
        (
            "/by-closure?account=",
            &[][..],
            "the request has no value (the naming closure found none) to name its lock",
        ),
        (
            "/short",
            &[][..],
            "the request has no path segment 3 to name its lock",
        ),
    ] {
        let answer = http(port, "POST", path, headers).await;
        assert_eq!(answer.status, 400, "{path} {headers:?}: {}", answer.body);
        assert_eq!(answer.body, says, "{path} {headers:?}");
        assert_eq!(answer.header("retry-after"), None, "{path}");
        assert_eq!(
            answer.header("content-type"),
            Some("text/plain; charset=utf-8")
        );
    }
    assert_eq!(
        ran.done(),
        0,
        "a request without a name reached its handler"
    );

    // The same routes with a name go through.
    let named = http(port, "POST", "/by-header", &[("x-account", "alice")]).await;
    assert_eq!(named.status, 200, "{}", named.body);
    let named = http(port, "POST", "/by-closure?account=alice", &[]).await;
    assert_eq!(named.status, 200, "{}", named.body);
    assert_eq!(ran.done(), 2);
    manager.shutdown().await;
}

/// Handlers that record, per value they see, how many requests are inside at once, and whether
/// the lock each runs under is named by that value.
#[derive(Clone, Default)]
struct PerValue {
    counters: Arc<std::sync::Mutex<std::collections::HashMap<String, Overlap>>>,
    /// `(lock name, value seen)` of each request whose lock is not `prefix + value`.
    mismatched: Arc<std::sync::Mutex<Vec<(String, String)>>>,
}

impl PerValue {
    async fn work(self, prefix: &str, value: String, lock: &str) -> &'static str {
        if lock != format!("{prefix}{value}") {
            self.mismatched
                .lock()
                .unwrap()
                .push((lock.to_owned(), value.clone()));
        }
        let counter = self
            .counters
            .lock()
            .unwrap()
            .entry(value)
            .or_default()
            .clone();
        counter.work(Duration::from_millis(30)).await
    }

    /// `(value, most inside at once, requests done)`, sorted by value.
    fn seen(&self) -> Vec<(String, usize, usize)> {
        let mut seen: Vec<_> = self
            .counters
            .lock()
            .unwrap()
            .iter()
            .map(|(v, c)| (v.clone(), c.most(), c.done()))
            .collect();
        seen.sort();
        seen
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spellings_of_one_value_take_one_lock_as_the_handler_sees_it() {
    let redis = RedisServer::start();
    let manager = LockManager::connect(&redis.url()).await.unwrap();
    let accounts = PerValue::default();
    let users = PerValue::default();
    let deposit = {
        let accounts = accounts.clone();
        move |axum::extract::Path(account): axum::extract::Path<String>,
              axum::Extension(held): axum::Extension<LockHeld>| {
            accounts
                .clone()
                .work_owned("account:", account, held.name().to_owned())
        }
    };
    // The handler treats `Alice` and `alice` as one user, and tells the layer so.
    let rename = {
        let users = users.clone();
        move |axum::extract::Path(user): axum::extract::Path<String>,
              axum::Extension(held): axum::Extension<LockHeld>| {
            users
                .clone()
                .work_owned("user:", user.to_lowercase(), held.name().to_owned())
        }
    };
    let app = Router::new()
        .route("/accounts/{account}", post(deposit.clone()))
        .route("/accounts/{account}/", post(deposit))
        .route_layer(
            LockLayer::segment(manager.clone(), 1)
                .prefix("account:")
                .wait(Duration::from_secs(30)),
        )
        .merge(
            Router::new()
                .route("/users/{user}", post(rename))
                .route_layer(
                    LockLayer::segment(manager.clone(), 1)
                        .prefix("user:")
                        .canonical(|v| v.to_lowercase())
                        .wait(Duration::from_secs(30)),
                ),
        );
    let port = serve(app).await;

    // Each spelling is sent three times, all at once; the handler sees the value after `=>`.
    let accounts_sent = [
        ("alice", "alice"),
        ("%61lice", "alice"),
        ("%61%6C%69%63%65", "alice"),
        ("alice/", "alice"),
        ("%61lice/", "alice"),
        ("a%2Fb", "a/b"),
        ("a%2fb", "a/b"),
        ("%61%2Fb", "a/b"),
        ("a+b", "a+b"),
        ("a%2Bb", "a+b"),
        ("a%2bb", "a+b"),
        ("a%25b", "a%b"),
        ("%61%25b", "a%b"),
        ("ALICE", "ALICE"),
        ("%41LICE", "ALICE"),
    ];
    let users_sent = ["alice", "Alice", "ALICE", "%41lice", "%61LICE"];
    let paths: Vec<String> = accounts_sent
        .iter()
        .map(|(raw, _)| format!("/accounts/{raw}"))
        .chain(users_sent.iter().map(|raw| format!("/users/{raw}")))
        .flat_map(|path| [path.clone(), path.clone(), path])
        .collect();
    let requests = paths
        .iter()
        .cloned()
        .map(|path| tokio::spawn(async move { (http(port, "POST", &path, &[]).await, path) }));
    for answer in futures_util::future::join_all(requests).await {
        let (answer, path) = answer.unwrap();
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    }

    // Every request ran under the lock of the value its handler saw ...
    assert_eq!(*accounts.mismatched.lock().unwrap(), []);
    assert_eq!(*users.mismatched.lock().unwrap(), []);
    // ... so requests that saw one value never overlapped.
    let each = |value: &str, spellings: usize| (value.to_owned(), 1, 3 * spellings);
    assert_eq!(
        accounts.seen(),
        [
            each("ALICE", 2),
            each("a%b", 2),
            each("a+b", 3),
            each("a/b", 3),
            each("alice", 5),
        ]
    );
    assert_eq!(users.seen(), [each("alice", 5)]);
    manager.shutdown().await;
}

/// An empty segment counts, as the router counts it: `/t//alice/pay` runs the handler of
/// `/t/{tenant}/{account}/pay` for account `alice` (tenant empty), so the layer's segment 2 must
/// be `alice` there too. Skipping the empty segment named the lock `account:pay` while the
/// handler worked on `alice`, beside a request for `/t/acme/alice/pay` under `account:alice`:
/// two requests inside one account's handler at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_empty_segment_counts_as_the_router_counts_it() {
    let redis = RedisServer::start();
    let manager = LockManager::connect(&redis.url()).await.unwrap();
    let accounts = PerValue::default();
    let pay = {
        let accounts = accounts.clone();
        move |axum::extract::Path((_tenant, account)): axum::extract::Path<(String, String)>,
              axum::Extension(held): axum::Extension<LockHeld>| {
            accounts
                .clone()
                .work_owned("account:", account, held.name().to_owned())
        }
    };
    let app = Router::new()
        .route("/t/{tenant}/{account}/pay", post(pay))
        .route_layer(
            LockLayer::segment(manager.clone(), 2)
                .prefix("account:")
                .wait(Duration::from_secs(30)),
        );
    let port = serve(app).await;
    let paths: [&'static str; 2] = ["/t/acme/alice/pay", "/t//alice/pay"];
    let requests = paths
        .repeat(3)
        .into_iter()
        .map(|path| tokio::spawn(async move { (http(port, "POST", path, &[]).await, path) }));
    for answer in futures_util::future::join_all(requests).await {
        let (answer, path) = answer.unwrap();
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    }
    assert_eq!(*accounts.mismatched.lock().unwrap(), []);
    assert_eq!(accounts.seen(), [("alice".to_owned(), 1, 6)]);
    // A segment that is empty where the lock's name should be is no name at all.
    let empty = http(port, "POST", "/t/acme//pay", &[]).await;
    assert_eq!(empty.status, 400, "{}", empty.body);
    manager.shutdown().await;
}

impl PerValue {
    /// [`PerValue::work`] with owned arguments, for a handler's `'static` future.
    async fn work_owned(self, prefix: &'static str, value: String, lock: String) -> &'static str {
        self.work(prefix, value, &lock).await
    }
}

/// Keys in Redis without an expiry.
fn lasting_keys(redis: &RedisServer) -> std::collections::BTreeSet<String> {
    let mut conn = redis.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    keys.into_iter()
        .filter(|k| redis::cmd("PTTL").arg(k).query::<i64>(&mut conn).unwrap() == -1)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_names_are_checked_before_anything_is_written() {
    let redis = RedisServer::start();
    let manager = LockManager::connect(&redis.url()).await.unwrap();
    let ran = Overlap::default();
    let handler = {
        let ran = ran.clone();
        move || ran.clone().work(Duration::ZERO)
    };
    const TENANTS: [&str; 2] = ["acme", "globex"];
    let app = Router::new()
        .route("/bare/{name}", post(handler.clone()))
        .route_layer(LockLayer::segment(manager.clone(), 1))
        .merge(
            Router::new()
                .route("/prefixed/{name}", post(handler.clone()))
                .route_layer(LockLayer::segment(manager.clone(), 1).prefix("account:")),
        )
        .merge(
            Router::new()
                .route("/tenants/{tenant}/export", post(handler.clone()))
                .route_layer(
                    PermitLayer::segment(manager.clone(), 1, 2)
                        .prefix("exports:")
                        .known(|tenant| TENANTS.contains(&tenant)),
                ),
        )
        .merge(
            Router::new()
                .route("/open/{tenant}/export", post(handler))
                .route_layer(PermitLayer::segment(manager.clone(), 1, 2).prefix("open:")),
        );
    let port = serve(app).await;
    let before = lasting_keys(&redis);

    let braces = "the request's lock name is refused: it holds `{` or `}`";
    let reserved = "the request's lock name is refused: it starts with `redisson_` or `lockman_`";
    for (path, status, body) in [
        ("/bare/%7Bx%7D", 400, braces),
        ("/bare/x%7D", 400, braces),
        ("/prefixed/%7Bx%7D", 400, braces),
        ("/bare/redisson_lock_queue:x", 400, reserved),
        ("/bare/lockman_client:1", 400, reserved),
        ("/bare/%6Cockman_waits", 400, reserved),
        ("/tenants/nobody/export", 404, "not found"),
        ("/tenants/ACME/export", 404, "not found"),
        ("/tenants/%7Bacme%7D/export", 400, braces),
    ] {
        let answer = http(port, "POST", path, &[]).await;
        assert_eq!(answer.status, status, "{path}: {}", answer.body);
        assert_eq!(answer.body, body, "{path}");
        assert_eq!(answer.header("retry-after"), None, "{path}");
    }
    assert_eq!(ran.done(), 0, "a refused name reached its handler");
    assert_eq!(lasting_keys(&redis), before, "a refused name wrote a key");

    // With a prefix, a name only starts as lockman's own keys do after it.
    let answer = http(port, "POST", "/prefixed/redisson_x", &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);

    // Forty distinct tenants, two of them known: the known ones leave their semaphore's count,
    // the others nothing at all.
    let tenants = TENANTS
        .map(String::from)
        .into_iter()
        .chain((2..40).map(|i| format!("t{i}")));
    for (i, tenant) in tenants.enumerate() {
        let answer = http(port, "POST", &format!("/tenants/{tenant}/export"), &[]).await;
        let want = if i < 2 { 200 } else { 404 };
        assert_eq!(answer.status, want, "{tenant}: {}", answer.body);
    }
    // (Once the two exports' permits are back: the set of held permits goes with the last.)
    let expected: std::collections::BTreeSet<String> =
        ["exports:acme", "exports:globex"].map(String::from).into();
    let left = || {
        let mut left = lasting_keys(&redis);
        left.retain(|k| !before.contains(k));
        left
    };
    support::wait::eventually(Duration::from_secs(10), || left() == expected).await;
    assert_eq!(left(), expected);

    // Without `known`, each distinct name leaves its key for good, as the docs say.
    for i in 0..10 {
        let answer = http(port, "POST", &format!("/open/t{i}/export"), &[]).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    let mut left = lasting_keys(&redis);
    left.retain(|k| !before.contains(k) && k.starts_with("open:"));
    assert_eq!(left.len(), 10, "{left:?}");
    manager.shutdown().await;
}

/// What the tests' process logs at WARN and above, for the tests that look for a line.
fn captured_log() -> Arc<std::sync::Mutex<Vec<u8>>> {
    support::logs::global(tracing::Level::WARN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_show_neither_the_request_nor_redis() {
    let log = captured_log();
    let redis = RedisServer::start();
    let manager = LockManager::connect(&redis.url()).await.unwrap();
    let app = Router::new()
        .route("/accounts/{account}", post(|| async { "done" }))
        .route_layer(
            LockLayer::segment(manager.clone(), 1)
                .prefix("account:")
                .wait(Duration::from_millis(200)),
        );
    let port = serve(app.clone()).await;

    // A key of another type where the lock would be: lockman fails (500), not the request.
    let mut conn = redis.conn();
    redis::cmd("SET")
        .arg("account:wrong-type")
        .arg("x")
        .query::<()>(&mut conn)
        .unwrap();
    // A name a browser could take for HTML, held elsewhere: busy (409).
    let script = "<script>alert(1)</script>";
    let holder = LockManager::connect(&redis.url()).await.unwrap();
    let _held = holder
        .lock(format!("account:{script}").as_str())
        .acquire()
        .await
        .unwrap();

    for (path, status, body) in [
        ("/accounts/wrong-type", 500, "lock service unavailable"),
        (
            "/accounts/%3Cscript%3Ealert(1)%3C%2Fscript%3E",
            409,
            "busy; retry later",
        ),
    ] {
        let answer = http(port, "POST", path, &[]).await;
        assert_eq!(answer.status, status, "{path}: {}", answer.body);
        assert_eq!(answer.body, body, "{path}");
        assert_eq!(
            answer.header("content-type"),
            Some("text/plain; charset=utf-8")
        );
        assert_eq!(answer.header("x-content-type-options"), Some("nosniff"));
    }
    // The detail is in the log ...
    let logged = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    assert!(
        logged
            .lines()
            .any(|l| l.contains("request answered 500") && l.contains("account:wrong-type")),
        "{logged}"
    );

    // ... and in the response's extensions, for an outer layer.
    let mut service = ::tower::Layer::layer(
        &LockLayer::segment(manager.clone(), 1).prefix("account:"),
        app.clone(),
    );
    std::future::poll_fn(|cx| {
        ::tower::Service::<axum::http::Request<Body>>::poll_ready(&mut service, cx)
    })
    .await
    .unwrap();
    let request = axum::http::Request::post("/accounts/wrong-type")
        .body(Body::empty())
        .unwrap();
    let response = ::tower::Service::call(&mut service, request).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let refusal = response.extensions().get::<Refusal>().expect("the refusal");
    assert!(
        matches!(
            refusal,
            Refusal::Lock {
                source: lockman::LockError::WrongType { .. },
                ..
            }
        ),
        "{refusal:?}"
    );
    assert!(
        refusal.to_string().contains("account:wrong-type"),
        "{refusal}"
    );
    holder.shutdown().await;
    manager.shutdown().await;
}
