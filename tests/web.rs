//! The actix-web integration, end to end: `examples/web.rs` run as a server on a real port, many
//! concurrent deposits on one account over HTTP. The final balance must be exactly the sum of
//! the deposits answered `200`, every other answer must be `409` with `Retry-After`, and the
//! server's `/metrics` must count the same. In process (actix-web's test service, a throwaway
//! redis-server): every spelling of a value takes the lock of the value `web::Path` gives the
//! handler; names from requests are checked before anything is written; refusals show neither
//! the request's value nor lockman's error. Run with
//! `cargo test --features actix-web,metrics --test web`.
#![cfg(all(feature = "actix-web", feature = "metrics"))]

mod support;

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{App, HttpResponse, test, web};
use lockman::LockManager;
use lockman::web::{RequestGuard, RequestLock, RequestLockError, RequestPermit, RequestPermits};
use support::RedisServer;

/// The example's binary, built beside this test by `cargo test` (or built now).
fn example() -> PathBuf {
    let dir = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .to_path_buf();
    let exe = dir.join("examples").join("web");
    if !exe.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let built = Command::new(cargo)
            .args([
                "build",
                "--example",
                "web",
                "--features",
                "actix-web,metrics",
            ])
            .status()
            .unwrap();
        assert!(built.success());
    }
    exe
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.1 request on its own connection: (status, headers, body).
fn http(port: u16, method: &str, path: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("a response");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_owned())
}

/// The value of a Prometheus sample line starting with `series`.
fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn concurrent_deposits_lose_nothing_and_busy_ones_get_409() {
    let redis = RedisServer::start();
    let port = support::free_port();
    let _server = Server(
        Command::new(example())
            .args(["--port", &port.to_string(), "--wait-ms", "40"])
            .env("REDIS_URL", redis.url())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(20), "server up");
        std::thread::sleep(Duration::from_millis(50));
    }

    let requests = 48;
    let answers: Vec<(u16, String, String)> = (0..requests)
        .map(|_| std::thread::spawn(move || http(port, "POST", "/accounts/alice/deposit/1")))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let ok = answers.iter().filter(|(s, _, _)| *s == 200).count();
    let busy: Vec<_> = answers.iter().filter(|(s, _, _)| *s != 200).collect();
    for (status, head, body) in &busy {
        assert_eq!(*status, 409, "{head}\n{body}");
        assert!(head.contains("retry-after: 1"), "{head}");
    }
    println!("{ok} deposits answered 200, {} busy", busy.len());
    assert!(ok > 0, "some deposits went through");
    assert!(
        !busy.is_empty(),
        "{requests} deposits of 10 ms each, 40 ms of wait: some are busy"
    );

    let (status, _, balance) = http(port, "GET", "/accounts/alice");
    assert_eq!(status, 200);
    assert_eq!(
        balance.trim(),
        ok.to_string(),
        "every deposit answered 200 counted once"
    );

    let (status, _, metrics) = http(port, "GET", "/metrics");
    assert_eq!(status, 200);
    let acquired = sample(
        &metrics,
        "lockman_acquire_total{kind=\"lock\",outcome=\"acquired\"}",
    );
    let timed_out = sample(
        &metrics,
        "lockman_acquire_total{kind=\"lock\",outcome=\"timed_out\"}",
    );
    assert_eq!(acquired as usize, ok, "{metrics}");
    assert_eq!(timed_out as usize, busy.len(), "{metrics}");
    assert!(
        metrics.contains("lockman_acquire_wait_seconds"),
        "{metrics}"
    );
}

#[test]
fn exports_across_two_instances_never_exceed_the_permits_and_busy_ones_get_429() {
    let redis = RedisServer::start();
    let ports = [support::free_port(), support::free_port()];
    let _servers: Vec<Server> = ports
        .iter()
        .map(|port| {
            Server(
                Command::new(example())
                    .args(["--port", &port.to_string(), "--wait-ms", "60"])
                    .env("REDIS_URL", redis.url())
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    let started = Instant::now();
    for port in ports {
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < Duration::from_secs(20), "server up");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let requests = 32;
    let answers: Vec<(u16, String, String)> = (0..requests)
        .map(|i| {
            let port = ports[i % 2];
            std::thread::spawn(move || http(port, "POST", "/tenants/acme/export"))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let ok = answers.iter().filter(|(s, _, _)| *s == 200).count();
    for (status, head, body) in answers.iter().filter(|(s, _, _)| *s != 200) {
        assert_eq!(*status, 429, "{head}\n{body}");
        assert!(head.contains("retry-after: 1"), "{head}");
    }
    println!("{ok} exports answered 200, {} busy", requests - ok);
    assert!(ok >= 2, "some exports ran");
    assert!(
        ok < requests,
        "{requests} exports of 50 ms, 60 ms of wait, 2 permits: some are busy"
    );
    let (_, _, most) = http(ports[0], "GET", "/tenants/acme/most");
    let most: u32 = most.trim().parse().unwrap();
    assert!(
        (1..=2).contains(&most),
        "{most} exports of one tenant at once, across both"
    );
    let mut raw = redis.conn();
    let free: String = redis::Commands::get(&mut raw, "exports:acme").unwrap();
    assert_eq!(free, "2", "every permit came back");
    let (_, _, metrics) = http(ports[0], "GET", "/metrics");
    assert!(metrics.contains("lockman_sync_wait_total"), "{metrics}");
}

/// Per value: `(inside now, most inside at once, done)`.
type Counts = HashMap<String, (usize, usize, usize)>;

/// How many requests are inside a handler now, and the most seen at once, per value the
/// handler sees; and each request whose lock is not named by that value.
#[derive(Clone, Default)]
struct PerValue {
    counters: Arc<Mutex<Counts>>,
    mismatched: Arc<Mutex<Vec<(String, String)>>>,
}

impl PerValue {
    async fn work(&self, prefix: &str, value: String, lock: &str) {
        if lock != format!("{prefix}{value}") {
            self.mismatched
                .lock()
                .unwrap()
                .push((lock.to_owned(), value.clone()));
        }
        {
            let mut counters = self.counters.lock().unwrap();
            let (inside, most, _) = counters.entry(value.clone()).or_default();
            *inside += 1;
            *most = (*most).max(*inside);
        }
        // The work itself, during which an unexcluded request would enter: not an ordering wait.
        tokio::time::sleep(Duration::from_millis(30)).await;
        let mut counters = self.counters.lock().unwrap();
        let (inside, _, done) = counters.entry(value).or_default();
        *inside -= 1;
        *done += 1;
    }

    /// `(value, most inside at once, requests done)`, sorted by value.
    fn seen(&self) -> Vec<(String, usize, usize)> {
        let mut seen: Vec<_> = self
            .counters
            .lock()
            .unwrap()
            .iter()
            .map(|(v, (_, most, done))| (v.clone(), *most, *done))
            .collect();
        seen.sort();
        seen
    }
}

struct Accounts(PerValue);
struct Users(PerValue);

async fn deposit(
    lock: RequestGuard,
    account: web::Path<String>,
    seen: web::Data<Accounts>,
) -> HttpResponse {
    seen.0
        .work("account:", account.into_inner(), lock.name())
        .await;
    HttpResponse::Ok().finish()
}

/// The handler treats `Alice` and `alice` as one user (and its `RequestLock` says so).
async fn rename(
    lock: RequestGuard,
    user: web::Path<String>,
    seen: web::Data<Users>,
) -> HttpResponse {
    seen.0.work("user:", user.to_lowercase(), lock.name()).await;
    HttpResponse::Ok().finish()
}

#[actix_rt::test]
async fn spellings_of_one_value_take_one_lock_as_web_path_sees_it() {
    let redis = RedisServer::start();
    let manager = LockManager::connect(&redis.url()).await.unwrap();
    let (accounts, users) = (PerValue::default(), PerValue::default());
    let wait = Duration::from_secs(30);
    let app = test::init_service(
        App::new()
            .app_data(web::Data::new(Accounts(accounts.clone())))
            .app_data(web::Data::new(Users(users.clone())))
            .app_data(
                RequestLock::path(manager.clone(), "account")
                    .prefix("account:")
                    .wait(wait),
            )
            .route("/accounts/{account}", web::post().to(deposit))
            .route("/accounts/{account}/", web::post().to(deposit))
            .service(
                web::scope("/users")
                    .app_data(
                        RequestLock::path(manager.clone(), "user")
                            .prefix("user:")
                            .canonical(|v| v.to_lowercase())
                            .wait(wait),
                    )
                    .route("/{user}", web::post().to(rename)),
            ),
    )
    .await;

    // Each spelling is sent three times, all at once; the handler sees the value after `=>`.
    // actix-web's router keeps `%2F`, `%25` and `%2B` encoded; `web::Path` decodes them.
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
    let answers =
        futures_util::future::join_all(paths.iter().map(|path| {
            test::call_service(&app, test::TestRequest::post().uri(path).to_request())
        }))
        .await;
    for (answer, path) in answers.iter().zip(&paths) {
        assert_eq!(answer.status(), 200, "{path}");
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

/// Keys in Redis without an expiry.
fn lasting_keys(redis: &RedisServer) -> BTreeSet<String> {
    let mut conn = redis.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    keys.into_iter()
        .filter(|k| redis::cmd("PTTL").arg(k).query::<i64>(&mut conn).unwrap() == -1)
        .collect()
}

async fn export(_permit: RequestPermit) -> HttpResponse {
    HttpResponse::Ok().finish()
}

async fn locked(_lock: RequestGuard) -> HttpResponse {
    HttpResponse::Ok().finish()
}

#[actix_rt::test]
async fn request_names_are_checked_before_anything_is_written() {
    let redis = RedisServer::start();
    let manager = LockManager::connect(&redis.url()).await.unwrap();
    const TENANTS: [&str; 2] = ["acme", "globex"];
    let app = test::init_service(
        App::new()
            .service(
                web::scope("/bare")
                    .app_data(RequestLock::path(manager.clone(), "name"))
                    .route("/{name}", web::post().to(locked)),
            )
            .service(
                web::scope("/prefixed")
                    .app_data(RequestLock::path(manager.clone(), "name").prefix("account:"))
                    .route("/{name}", web::post().to(locked)),
            )
            .service(
                web::scope("/tenants")
                    .app_data(
                        RequestPermits::path(manager.clone(), "tenant", 2)
                            .prefix("exports:")
                            .known(|tenant| TENANTS.contains(&tenant)),
                    )
                    .route("/{tenant}/export", web::post().to(export)),
            ),
    )
    .await;
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
        let answer =
            test::call_service(&app, test::TestRequest::post().uri(path).to_request()).await;
        assert_eq!(answer.status().as_u16(), status, "{path}");
        assert_eq!(answer.headers().get("retry-after"), None, "{path}");
        let got = test::read_body(answer).await;
        assert_eq!(String::from_utf8_lossy(&got), body, "{path}");
    }
    assert_eq!(lasting_keys(&redis), before, "a refused name wrote a key");

    let answer = test::call_service(
        &app,
        test::TestRequest::post()
            .uri("/prefixed/redisson_x")
            .to_request(),
    )
    .await;
    assert_eq!(answer.status(), 200);

    // Forty distinct tenants, two of them known: the known ones leave their semaphore's count,
    // the others nothing at all.
    let tenants = TENANTS
        .map(String::from)
        .into_iter()
        .chain((2..40).map(|i| format!("t{i}")));
    for (i, tenant) in tenants.enumerate() {
        let request = test::TestRequest::post()
            .uri(&format!("/tenants/{tenant}/export"))
            .to_request();
        let answer = test::call_service(&app, request).await;
        assert_eq!(answer.status(), if i < 2 { 200 } else { 404 }, "{tenant}");
    }
    // (Once the two exports' permits are back: the set of held permits goes with the last.)
    let expected: BTreeSet<String> = ["exports:acme", "exports:globex"].map(String::from).into();
    let left = || {
        let mut left = lasting_keys(&redis);
        left.retain(|k| !before.contains(k));
        left
    };
    support::wait::eventually(Duration::from_secs(10), || left() == expected).await;
    assert_eq!(left(), expected);
    manager.shutdown().await;
}

#[actix_rt::test]
async fn refusals_show_neither_the_request_nor_redis() {
    let redis = RedisServer::start();
    let manager = LockManager::connect(&redis.url()).await.unwrap();
    let app = test::init_service(
        App::new()
            .app_data(
                RequestLock::path(manager.clone(), "account")
                    .prefix("account:")
                    .wait(Duration::from_millis(200)),
            )
            .route("/accounts/{account}", web::post().to(locked))
            // No `RequestLock` for this one: a mistake of the application's, answered 500.
            .service(
                web::scope("/unconfigured")
                    .route("/{x}", web::post().to(|_p: RequestPermit| async { "" })),
            ),
    )
    .await;
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
        ("/unconfigured/x", 500, "lock service unavailable"),
    ] {
        let answer =
            test::call_service(&app, test::TestRequest::post().uri(path).to_request()).await;
        assert_eq!(answer.status().as_u16(), status, "{path}");
        let header = |name: &str| {
            answer
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        assert_eq!(
            header("content-type").as_deref(),
            Some("text/plain; charset=utf-8"),
            "{path}"
        );
        assert_eq!(
            header("x-content-type-options").as_deref(),
            Some("nosniff"),
            "{path}"
        );
        // The detail stays with the error, which actix-web attaches to the response.
        let error = answer
            .response()
            .error()
            .and_then(|e| e.as_error::<RequestLockError>())
            .map(ToString::to_string)
            .expect("the RequestLockError");
        if status == 500 && path.starts_with("/accounts") {
            assert!(error.contains("account:wrong-type"), "{error}");
        }
        let got = test::read_body(answer).await;
        assert_eq!(String::from_utf8_lossy(&got), body, "{path}");
    }
    holder.shutdown().await;
    manager.shutdown().await;
}
