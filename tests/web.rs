//! The actix-web integration, end to end: `examples/web.rs` run as a server on a real port, many
//! concurrent deposits on one account over HTTP. The final balance must be exactly the sum of
//! the deposits answered `200`, every other answer must be `409` with `Retry-After`, and the
//! server's `/metrics` must count the same. Run with
//! `cargo test --features actix-web,metrics --test web`.
#![cfg(all(feature = "actix-web", feature = "metrics"))]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
