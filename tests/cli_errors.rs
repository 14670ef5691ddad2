//! The `lockman` command's errors: each one line on stderr that names its cause, with the exit
//! code the README's table gives, against redis-servers (and a fake one) started here. Run
//! with `cargo test --features cli --test cli_errors`.
#![cfg(feature = "cli")]

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use lockman::{Config, LockError, LockManager};
use serde_json::Value;
use support::{Options, RedisServer};

const LOCKMAN: &str = env!("CARGO_BIN_EXE_lockman");

/// `lockman --url URL ARGS…`, with no URL from the environment.
fn lockman_at(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(LOCKMAN);
    cmd.arg("--url").arg(url).args(args);
    cmd.env_remove("LOCKMAN_URL").env_remove("REDIS_URL");
    cmd
}

/// Runs `lockman`, failing the test when it is still running after 20 s (a refusal that did
/// not happen: `watch ""` used to run forever).
fn run_at(url: &str, args: &[&str]) -> Output {
    let mut child = lockman_at(url, args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lockman");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "lockman {args:?} still ran after 20s; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn run(server: &RedisServer, args: &[&str]) -> Output {
    run_at(&server.url(), args)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The exit code, and stderr's one line (the test fails when stderr is not exactly one line).
fn one_line(out: &Output) -> (i32, String) {
    let err = stderr(out);
    assert_eq!(err.lines().count(), 1, "one line on stderr: {err:?}");
    assert!(err.ends_with('\n'), "{err:?}");
    (
        out.status.code().expect("an exit code"),
        err.trim_end().to_owned(),
    )
}

fn connections_received(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut server.conn())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_connections_received")
}

#[test]
fn the_empty_name_is_refused_by_every_subcommand_before_connecting() {
    let server = RedisServer::start();
    let before = connections_received(&server);
    for args in [
        &["exec", "", "--", "true"][..],
        &["exec", "--semaphore", "--permits", "1", "", "--", "true"],
        &["elect", "", "--", "true"],
        &["leader", ""],
        &["leader", "--watch", ""],
        &["inspect", ""],
        &["unlock", "--force", "--yes", ""],
        &["semaphore", "", "--set", "1"],
        &["latch", ""],
        &["latch", "", "wait"],
        &["watch", ""],
    ] {
        let (code, line) = one_line(&run(&server, args));
        assert_eq!(
            (code, line.as_str()),
            (2, "lockman: the name must not be empty"),
            "{args:?}"
        );
    }
    // `connections_received` itself connects once per call: nothing else came.
    assert_eq!(
        connections_received(&server),
        before + 1,
        "no lockman connected"
    );
    let keys: u64 = redis::cmd("DBSIZE").query(&mut server.conn()).unwrap();
    assert_eq!(keys, 0, "no client record, no key");
}

/// A lock-delay too long for Redis is bad usage, refused before anything is written (it made
/// every acquire fail in its script after writing the hold, and `exec` exited 69).
#[test]
fn a_lock_delay_too_long_for_redis_is_refused_before_anything_is_written() {
    let server = RedisServer::start();
    let args = [
        "--lock-delay",
        "100000000000000000s",
        "exec",
        "big",
        "--",
        "true",
    ];
    let (code, line) = one_line(&run(&server, &args));
    assert_eq!(code, 2, "{line}");
    assert!(line.contains("lock delay"), "{line}");
    let keys: u64 = redis::cmd("DBSIZE").query(&mut server.conn()).unwrap();
    assert_eq!(keys, 0, "nothing written");
}

/// A TCP port that answers every connection with an HTTP error, as a web server would.
fn not_redis() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 512];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    port
}

#[test]
fn doctor_names_a_port_that_is_not_redis() {
    let url = format!("redis://127.0.0.1:{}/0", not_redis());
    let out = run_at(&url, &["doctor"]);
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let first = report.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!(
            "✘ server           {url} is not a Redis server (what answered does not speak RESP)"
        ),
        "{report}"
    );
}

#[test]
fn a_port_that_is_not_redis_is_named_as_such() {
    let url = format!("redis://127.0.0.1:{}/0", not_redis());
    for args in [&["inspect", "x"][..], &["exec", "x", "--", "true"]] {
        let (code, line) = one_line(&run_at(&url, args));
        assert_eq!(code, 69, "{args:?}: {line}");
        assert_eq!(
            line,
            format!("lockman: {url} is not a Redis server (what answered does not speak RESP)"),
            "{args:?}"
        );
    }
}

/// Every kind of thing a name can hold, each held or set by a manager of the test.
#[tokio::test]
async fn a_wrong_kind_names_what_the_name_holds() {
    let server = RedisServer::start();
    let manager = LockManager::start(Config::new(server.url())).await.unwrap();
    let _lock = manager.lock("lk").acquire().await.unwrap();
    let _read = manager
        .read_write_lock("rw")
        .read()
        .acquire()
        .await
        .unwrap();
    let _fenced = manager.fenced_lock("fe").acquire().await.unwrap();
    let _fair = manager.fair_lock("fl").acquire().await.unwrap();
    // A fair lock with a waiter in its queue ("fq"): its queue keys make it "a fair lock".
    let _fair_held = manager.fair_lock("fq").acquire().await.unwrap();
    let other = LockManager::start(Config::new(server.url())).await.unwrap();
    let waiter = tokio::spawn({
        let lock = other.fair_lock("fq");
        async move { lock.acquire().await }
    });
    support::wait::queued(&mut server.conn(), "fq", 1).await;
    assert!(manager.semaphore("sem").try_set_permits(3).await.unwrap());
    assert!(
        manager
            .count_down_latch("la")
            .try_set_count(2)
            .await
            .unwrap()
    );
    let permits = manager.permit_semaphore("ps");
    assert!(permits.try_set_permits(2).await.unwrap());
    let _permit = permits.acquire(1).await.unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("lst")
        .arg("a")
        .query(&mut server.conn())
        .unwrap();
    let cases: [(&[&str], &str); 15] = [
        (
            &["semaphore", "fq", "--set", "1"],
            r#""fq" holds a fair lock, not a semaphore"#,
        ),
        // A fair lock with nobody queued is the plain lock's hash and nothing else: "a lock".
        (
            &["latch", "fl", "count-down"],
            r#""fl" holds a lock, not a latch"#,
        ),
        (
            &[
                "exec",
                "--wait",
                "1s",
                "--semaphore",
                "--permits",
                "1",
                "fl",
                "--",
                "true",
            ],
            r#""fl" holds a lock, not a permit semaphore"#,
        ),
        (
            &["latch", "lk", "set", "2"],
            r#""lk" holds a lock, not a latch"#,
        ),
        (
            &["latch", "rw", "count-down"],
            r#""rw" holds a read-write lock, not a latch"#,
        ),
        (
            &["latch", "fe", "wait", "--timeout", "1s"],
            r#""fe" holds a fenced lock, not a latch"#,
        ),
        (
            &["semaphore", "lk", "--add", "1"],
            r#""lk" holds a lock, not a semaphore"#,
        ),
        (
            &["semaphore", "rw"],
            r#""rw" holds a read-write lock, not a semaphore"#,
        ),
        (
            &["semaphore", "lst"],
            r#""lst" holds a redis list, not a semaphore"#,
        ),
        (
            &["exec", "--wait", "1s", "sem", "--", "true"],
            r#""sem" holds a semaphore's or a latch's count, not a lock"#,
        ),
        (
            &["exec", "--wait", "1s", "--kind", "read", "la", "--", "true"],
            r#""la" holds a semaphore's or a latch's count, not a read-write lock"#,
        ),
        (
            &["exec", "--wait", "1s", "--kind", "fair", "ps", "--", "true"],
            r#""ps" holds a permit semaphore, not a fair lock"#,
        ),
        (
            &[
                "exec", "--wait", "1s", "--kind", "write", "lk", "--", "true",
            ],
            r#""lk" holds a lock, not a read-write lock"#,
        ),
        (
            &[
                "exec",
                "--wait",
                "1s",
                "--semaphore",
                "--permits",
                "1",
                "lk",
                "--",
                "true",
            ],
            r#""lk" holds a lock, not a permit semaphore"#,
        ),
        (
            &[
                "exec",
                "--wait",
                "1s",
                "--semaphore",
                "--permits",
                "1",
                "lst",
                "--",
                "true",
            ],
            r#""lst" holds a redis list, not a permit semaphore"#,
        ),
    ];
    for (args, said) in cases {
        let out = tokio::task::spawn_blocking({
            let url = server.url();
            move || run_at(&url, args)
        })
        .await
        .unwrap();
        let (code, line) = one_line(&out);
        assert_eq!((code, line), (69, format!("lockman: {said}")), "{args:?}");
    }
    // Nothing was changed: the latch keeps its count, the semaphore its permits.
    let mut conn = server.conn();
    let counts: (u64, u64) = redis::cmd("MGET")
        .arg("la")
        .arg("sem")
        .query(&mut conn)
        .unwrap();
    assert_eq!(counts, (2, 3));
    waiter.abort();
    other.shutdown().await;
    manager.shutdown().await;
}

#[test]
fn semaphore_set_on_a_set_semaphore_exits_1_and_changes_nothing() {
    let server = RedisServer::start();
    let out = run(&server, &["semaphore", "s", "--set", "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = run(&server, &["semaphore", "s", "--set", "5", "--add", "1"]);
    let (code, line) = one_line(&out);
    assert_eq!(
        (code, line.as_str()),
        (1, r#"lockman: "s" has permits already; not set"#)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("count:   3 "),
        "shown, unchanged (no --add either): {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `lockman ARGS…` with the URL in `$LOCKMAN_URL` (not on the command line, where a password
/// is warned about) and the environment's `extra`.
fn run_env(url: &str, args: &[&str], extra: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(LOCKMAN);
    cmd.args(args)
        .env("LOCKMAN_URL", url)
        .env_remove("REDIS_URL")
        .env_remove("LOCKMAN_PASSWORD")
        .env_remove("LOCKMAN_MASTER_PASSWORD")
        .env_remove("LOCKMAN_PREFIX");
    for (name, value) in extra {
        cmd.env(name, value);
    }
    cmd.stdin(Stdio::null()).output().expect("run lockman")
}

/// A line of redis-rs's own: an error-kind name (`- AuthenticationFailed`), which means nothing
/// at a shell.
fn has_kind_name(line: &str) -> bool {
    [
        "AuthenticationFailed",
        "InvalidClientConfig",
        "ResponseError",
        "IoError",
        "ClientError",
    ]
    .iter()
    .any(|kind| line.contains(kind))
}

#[test]
fn a_missing_or_wrong_password_is_one_line() {
    let server = RedisServer::start_with(Options {
        password: Some("pw".into()),
        args: ["--user", "app", "on", ">apppw", "~*", "&*", "+@all"]
            .map(String::from)
            .into(),
        ..Options::default()
    });
    let port = server.port();
    let (code, line) = one_line(&run_at(
        &format!("redis://127.0.0.1:{port}/0"),
        &["inspect", "x"],
    ));
    assert_eq!(code, 69);
    // The hint names the ways that keep the password out of ps, not the command line.
    assert_eq!(
        line,
        "lockman: redis wants a password (NOAUTH): give it with --password-file FILE or \
         $LOCKMAN_PASSWORD (or the whole URL in $LOCKMAN_URL: redis://USER:PASSWORD@host:port)"
    );
    for (url, shown) in [
        (
            format!("redis://:nope@127.0.0.1:{port}/0"),
            format!("redis://:***@127.0.0.1:{port}/0"),
        ),
        (
            format!("redis://app:nope@127.0.0.1:{port}/0"),
            format!("redis://app:***@127.0.0.1:{port}/0"),
        ),
    ] {
        let (code, line) = one_line(&run_env(&url, &["inspect", "x"], &[]));
        assert_eq!(code, 69, "{line}");
        assert_eq!(
            line,
            format!(
                "lockman: redis at {shown} refused the user name or password: check them (the \
                 password: --password-file, $LOCKMAN_PASSWORD or the URL; an ACL user: \
                 redis://USER:PASSWORD@host:port)"
            ),
        );
        assert!(!has_kind_name(&line), "{line}");
    }
    let out = run_env(
        &format!("redis://app:apppw@127.0.0.1:{port}/0"),
        &["inspect", "x"],
        &[],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "the right password works: {}",
        stderr(&out)
    );
    assert_eq!(
        stderr(&out),
        "",
        "no warning for a URL from the environment"
    );
}

/// A password given to a server that has none is said so (Redis refuses it; redis-rs reports
/// it as any refused password), and a URL without a scheme gets the hint of one.
#[test]
fn a_password_for_a_server_without_one_and_a_url_without_scheme_are_said_plainly() {
    let server = RedisServer::start();
    let port = server.port();
    let (code, line) = one_line(&run_env(
        &format!("redis://:pw@127.0.0.1:{port}/0"),
        &["inspect", "x"],
        &[],
    ));
    assert_eq!(code, 69);
    assert_eq!(
        line,
        format!(
            "lockman: redis at redis://:***@127.0.0.1:{port}/0 has no password, but one was \
             given: leave it out (of the URL, --password-file and $LOCKMAN_PASSWORD), or set one \
             on the server"
        )
    );
    // The same given by LOCKMAN_PASSWORD.
    let (code, line) = one_line(&run_env(
        &format!("redis://127.0.0.1:{port}/0"),
        &["inspect", "x"],
        &[("LOCKMAN_PASSWORD", "pw")],
    ));
    assert_eq!(code, 69);
    assert!(
        line.contains("has no password, but one was given"),
        "{line}"
    );
    for url in [
        format!("127.0.0.1:{port}"),
        format!("redis//127.0.0.1:{port}"),
    ] {
        let (code, line) = one_line(&run_at(&url, &["inspect", "x"]));
        assert_eq!(code, 2, "{line}");
        assert_eq!(
            line,
            "lockman: invalid redis url: …: it does not start with a scheme; a Redis URL starts \
             with redis://, rediss:// (TLS) or redis+unix:// (a socket), e.g. \
             redis://127.0.0.1:6379"
        );
    }
    for (url, said) in [
        (
            format!("http://127.0.0.1:{port}"),
            "lockman: invalid redis url: http://…: the scheme is not one of redis://, rediss:// \
             (TLS) or redis+unix:// (a socket)",
        ),
        (
            format!("redis://127.0.0.1:{port}/x"),
            "lockman: invalid redis url: redis://…: Invalid database number",
        ),
        (
            "redis://127.0.0.1:99999".to_owned(),
            "lockman: invalid redis url: redis://…: it is not a valid URL (a password with @ / : \
             ? # or % needs percent-encoding)",
        ),
    ] {
        let (code, line) = one_line(&run_at(&url, &["inspect", "x"]));
        assert_eq!((code, line.as_str()), (2, said), "{url}");
    }
}

/// A password on the command line is warned about (ps shows it); `--password-file` and
/// `$LOCKMAN_PASSWORD` give it instead, and replace the URL's.
#[test]
fn a_password_in_argv_is_warned_and_a_password_file_replaces_the_urls() {
    let server = RedisServer::start_with(Options {
        password: Some("pw".into()),
        ..Options::default()
    });
    let port = server.port();
    let warning = "lockman: warning: the password in --url is visible to every user of this \
                   machine (ps, /proc/PID/cmdline); give it with --password-file FILE or \
                   $LOCKMAN_PASSWORD, or the URL in $LOCKMAN_URL";
    let out = run_at(
        &format!("redis://:pw@127.0.0.1:{port}/0"),
        &["inspect", "x"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stderr(&out), format!("{warning}\n"));
    // A socket's ?pass= too.
    let out = run_at(
        "redis+unix:///nonexistent-dir/r.sock?pass=pw",
        &["inspect", "x"],
    );
    assert!(
        stderr(&out).starts_with(&format!("{warning}\n")),
        "{}",
        stderr(&out)
    );

    let dir = tempfile::tempdir().unwrap();
    let (right, wrong) = (dir.path().join("right"), dir.path().join("wrong"));
    std::fs::write(&right, "pw\n").unwrap();
    std::fs::write(&wrong, "nope\n").unwrap();
    let plain = format!("redis://127.0.0.1:{port}/0");
    let out = run_at(
        &plain,
        &["--password-file", right.to_str().unwrap(), "inspect", "x"],
    );
    assert_eq!((out.status.code(), stderr(&out)), (Some(1), String::new()));
    // It replaces the URL's password, and wins over LOCKMAN_PASSWORD.
    let out = run_env(
        &format!("redis://:nope@127.0.0.1:{port}/0"),
        &["--password-file", right.to_str().unwrap(), "inspect", "x"],
        &[("LOCKMAN_PASSWORD", "nope")],
    );
    assert_eq!((out.status.code(), stderr(&out)), (Some(1), String::new()));
    let out = run_env(&plain, &["inspect", "x"], &[("LOCKMAN_PASSWORD", "pw")]);
    assert_eq!((out.status.code(), stderr(&out)), (Some(1), String::new()));
    let (code, line) = one_line(&run_env(
        &plain,
        &["--password-file", wrong.to_str().unwrap(), "inspect", "x"],
        &[],
    ));
    assert_eq!(code, 69);
    assert!(line.contains("refused the user name or password"), "{line}");
    let missing = dir.path().join("missing");
    let (code, line) = one_line(&run_env(
        &plain,
        &["--password-file", missing.to_str().unwrap(), "inspect", "x"],
        &[],
    ));
    assert_eq!(
        (code, line),
        (
            2,
            format!(
                "lockman: --password-file {}: cannot read it: No such file or directory (os \
                 error 2)",
                missing.display()
            )
        )
    );
}

/// `exec` and `elect` warn once on stderr before holding on a server that may evict lock keys;
/// nothing on one that may not, nor for commands that hold nothing.
#[test]
fn exec_and_elect_warn_once_on_a_server_that_may_evict_lock_keys() {
    let evicting = RedisServer::start_with(Options {
        args: ["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]
            .map(String::from)
            .into(),
        ..Options::default()
    });
    let warning = "lockman: warning: the server may evict lock keys (maxmemory-policy \
                   allkeys-lru): under memory pressure a lock can vanish while held, and a second \
                   holder take it; set maxmemory-policy noeviction (lockman doctor says more)\n";
    let out = run(&evicting, &["exec", "x", "--", "true"]);
    assert_eq!((out.status.code(), stderr(&out)), (Some(0), warning.into()));
    let out = run(&evicting, &["elect", "--once", "e", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).matches("may evict lock keys").count(),
        1,
        "{}",
        stderr(&out)
    );
    let out = run(&evicting, &["inspect", "x"]);
    assert_eq!((out.status.code(), stderr(&out)), (Some(1), String::new()));
    let safe = RedisServer::start();
    let out = run(&safe, &["exec", "x", "--", "true"]);
    assert_eq!((out.status.code(), stderr(&out)), (Some(0), String::new()));
}

/// `#insecure` is said once on stderr, whatever happens next.
#[test]
fn insecure_tls_is_warned_on_stderr() {
    let port = support::closed_port();
    let out = run_at(
        &format!("rediss://127.0.0.1:{port}/#insecure"),
        &["--connect-timeout", "1s", "inspect", "x"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert_eq!(
        lines[0],
        "lockman: warning: TLS certificate and host checks are OFF (#insecure in the URL): \
         anyone in the middle can read and change every command"
    );
    let out = run_at(
        &format!("rediss://127.0.0.1:{port}/"),
        &["--connect-timeout", "1s", "inspect", "x"],
    );
    assert!(!stderr(&out).contains("#insecure"), "{}", stderr(&out));
}

#[test]
fn an_unreadable_or_non_pem_tls_ca_is_refused() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let not_pem = dir.path().join("ca.der");
    std::fs::write(&not_pem, b"\x30\x82\x01\x0a not a pem").unwrap();
    let (code, line) = one_line(&run(
        &server,
        &["--tls-ca", missing.to_str().unwrap(), "inspect", "x"],
    ));
    assert_eq!(code, 2);
    assert_eq!(
        line,
        format!(
            "lockman: --tls-ca {}: cannot read it: No such file or directory (os error 2)",
            missing.display()
        )
    );
    // Refused even where no TLS is spoken yet: the setting is wrong whatever the URL.
    let (code, line) = one_line(&run(
        &server,
        &["--tls-ca", not_pem.to_str().unwrap(), "inspect", "x"],
    ));
    assert_eq!(code, 2);
    assert_eq!(
        line,
        format!(
            r#"lockman: --tls-ca {}: no PEM certificate in it (a "-----BEGIN CERTIFICATE-----" block)"#,
            not_pem.display()
        )
    );
}

/// The library refuses the PEM itself: a `Config` with no certificate in its CA never starts.
#[tokio::test]
async fn the_library_refuses_a_tls_ca_without_a_certificate() {
    let server = RedisServer::start();
    for pem in [
        &b""[..],
        b"not a pem",
        b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    ] {
        let started = LockManager::start(Config::new(server.url()).tls_ca_pem(pem)).await;
        match started {
            Err(LockError::InvalidArgument { what: "tls CA", .. }) => {}
            Err(other) => panic!("{pem:?}: {other}"),
            Ok(_) => panic!("{pem:?}: started"),
        }
    }
}

/// `sh -c 'trap "" INT; exec lockman …'`: lockman starts with SIGINT ignored, as a shell starts
/// a background job.
fn spawn_ignoring_sigint(server: &RedisServer, args: &[&str]) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg("trap '' INT; exec \"$0\" \"$@\"")
        .arg(LOCKMAN)
        .arg("--url")
        .arg(server.url())
        .args(args)
        .env_remove("LOCKMAN_URL")
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lockman")
}

/// Sends SIGINT and waits (20 s at most) for the process to end; its exit code.
fn interrupt(mut child: Child) -> Option<i32> {
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("SIGINT did not end lockman (pid {pid})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn first_line(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    line
}

#[tokio::test]
async fn sigint_ends_every_long_running_subcommand_started_with_it_ignored() {
    let server = RedisServer::start();
    let manager = LockManager::start(Config::new(server.url())).await.unwrap();
    let _busy = manager.lock("busy").acquire().await.unwrap();
    let _lead = manager.election("jobs").campaign().await.unwrap();
    assert!(
        manager
            .count_down_latch("gate")
            .try_set_count(1)
            .await
            .unwrap()
    );
    // Those that print first: SIGINT once their first line is out; they end with 0.
    for args in [
        &["leader", "--watch", "jobs"][..],
        &["top", "--json"],
        &["watch", "busy"],
    ] {
        let mut child = spawn_ignoring_sigint(&server, args);
        let line = tokio::task::spawn_blocking(move || (first_line(&mut child), child))
            .await
            .unwrap();
        let (line, child) = line;
        assert!(!line.is_empty(), "{args:?} printed");
        let code = tokio::task::spawn_blocking(move || interrupt(child))
            .await
            .unwrap();
        assert_eq!(code, Some(0), "{args:?}");
    }
    // Those that wait: SIGINT once they subscribed; they end as an interrupted command, 130.
    let mut raw = server.conn();
    for (args, channel) in [
        (
            &["exec", "busy", "--", "true"][..],
            "redisson_lock__channel:{busy}",
        ),
        (
            &["latch", "gate", "wait"],
            "redisson_countdownlatch__channel__{gate}",
        ),
        (
            &["elect", "jobs", "--", "true"],
            "redisson_lock__channel:{jobs}",
        ),
    ] {
        let child = spawn_ignoring_sigint(&server, args);
        support::wait::subscribers(&mut raw, channel, 1).await;
        let code = tokio::task::spawn_blocking(move || interrupt(child))
            .await
            .unwrap();
        assert_eq!(code, Some(130), "{args:?}");
        support::wait::until("the waiter left", || {
            redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(channel)
                .query::<(String, u64)>(&mut raw)
                .is_ok_and(|(_, n)| n == 0)
        })
        .await;
    }
    manager.shutdown().await;
}

#[tokio::test]
async fn leader_names_the_service_that_leads() {
    let server = RedisServer::start();
    // Records are first written a third of the watchdog timeout after the start.
    let config = Config::new(server.url())
        .client_name("billing")
        .watchdog_timeout(Duration::from_secs(3));
    let manager = LockManager::start(config).await.unwrap();
    let mut recorded = false;
    for _ in 0..100 {
        if !manager.clients().await.unwrap().is_empty() {
            recorded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recorded, "the manager's client record was written");
    let lead = manager.election("jobs").campaign().await.unwrap();
    let url = server.url();
    let out = tokio::task::spawn_blocking(move || run_at(&url, &["leader", "jobs"]))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let host = hostname();
    assert_eq!(
        text.trim_end(),
        format!(
            "jobs: led by billing@{host}:{} ({}), term {}",
            std::process::id(),
            lead_holder(&server),
            lead.term()
        )
    );
    let url = server.url();
    let out = tokio::task::spawn_blocking(move || run_at(&url, &["leader", "jobs", "--json"]))
        .await
        .unwrap();
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["service"], "billing");
    lead.resign().await.unwrap();
    manager.shutdown().await;
}

/// The one holder field of the election's hash.
fn lead_holder(server: &RedisServer) -> String {
    lead_holder_of(server, "jobs")
}

fn hostname() -> String {
    let out = Command::new("hostname").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn connection_options_have_their_own_heading_in_every_help() {
    for sub in [
        "exec",
        "elect",
        "leader",
        "inspect",
        "unlock",
        "semaphore",
        "latch",
        "ls",
        "top",
        "doctor",
        "watch",
    ] {
        let out = Command::new(LOCKMAN)
            .args([sub, "--help"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{sub}");
        let help = String::from_utf8_lossy(&out.stdout);
        let (own, connection) = help
            .split_once("\nConnection options:\n")
            .unwrap_or_else(|| panic!("{sub}: no Connection options heading:\n{help}"));
        for option in [
            "--url",
            "--sentinel",
            "--cluster",
            "--tls-ca",
            "--connect-timeout",
            "--prefix",
        ] {
            assert!(
                connection.contains(option),
                "{sub}: {option} under the heading"
            );
            assert!(
                !own.contains(option),
                "{sub}: {option} among the subcommand's own"
            );
        }
    }
}

#[test]
fn a_closed_stdout_ends_lockman_quietly() {
    let server = RedisServer::start();
    // The pipe's read end is closed before lockman has connected, so its first print fails.
    let mut child = lockman_at(&server.url(), &["inspect", "x"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(stderr(&out), "", "no panic, no message");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(SIGPIPE), "{:?}", out.status);
}

/// SIGPIPE's number (13 on Linux and the BSDs).
const SIGPIPE: i32 = 13;

/// A tmux server of its own for one test, ended however the test ends.
struct Tmux(String);

impl Tmux {
    fn new(name: &str) -> Option<Self> {
        if Command::new("tmux").arg("-V").output().is_err() {
            eprintln!("SKIPPED: tmux is not installed (apt-get install tmux)");
            return None;
        }
        Some(Self(format!("lockman-{name}-{}", std::process::id())))
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.0])
            .args(args)
            .output()
            .expect("run tmux")
    }

    /// Runs `command` (a shell line) in a 200-column terminal.
    fn start(&self, command: &str) {
        let out = self.run(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "200",
            "-y",
            "10",
            "sh",
            "-c",
            command,
        ]);
        assert!(out.status.success(), "{out:?}");
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// On a terminal, `exec`'s waiting line and `unlock --force`'s question name the holder's
/// service, host and pid (from its client record) beside its holder id.
#[tokio::test]
async fn the_waiting_line_and_the_unlock_prompt_name_the_holders_service() {
    let Some(tmux) = Tmux::new("holder") else {
        return;
    };
    let server = RedisServer::start();
    // Records are first written a third of the watchdog timeout after the start.
    let config = Config::new(server.url())
        .client_name("billing")
        .watchdog_timeout(Duration::from_secs(3));
    let manager = LockManager::start(config).await.unwrap();
    let guard = manager.lock("orders").acquire().await.unwrap();
    let mut recorded = false;
    for _ in 0..100 {
        if !manager.clients().await.unwrap().is_empty() {
            recorded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recorded, "the manager's client record was written");
    let holder = lead_holder_of(&server, "orders");
    let who = format!("billing@{}:{} ({holder})", hostname(), std::process::id());
    let url = server.url();
    // The question first (answered no), then the wait, both while the test holds the lock.
    tmux.start(&format!(
        "{LOCKMAN} --url {url} unlock --force orders; {LOCKMAN} --url {url} exec orders -- true; sleep 30"
    ));
    let question = format!("force-unlock \"orders\", held by {who}? [y/N]");
    let socket = tmux.0.clone();
    tokio::task::spawn_blocking(move || screen_shows(&socket, &question))
        .await
        .unwrap();
    let out = tmux.run(&["send-keys", "-t", "t", "n", "Enter"]);
    assert!(out.status.success(), "{out:?}");
    let (socket, text) = (
        tmux.0.clone(),
        format!("waiting for \"orders\": held by {who}"),
    );
    let screen = tokio::task::spawn_blocking(move || screen_shows(&socket, &text))
        .await
        .unwrap();
    assert!(screen.contains("not confirmed; nothing done"), "{screen}");
    drop(guard);
    manager.shutdown().await;
}

/// Waits (15 s at most) until the screen of the tmux server `socket` contains `text`; the
/// screen.
fn screen_shows(socket: &str, text: &str) -> String {
    let mut seen = String::new();
    let shown = support::wait::eventually_blocking(Duration::from_secs(15), || {
        let out = Command::new("tmux")
            .args(["-L", socket, "capture-pane", "-p", "-t", "t"])
            .output()
            .expect("run tmux");
        seen = String::from_utf8_lossy(&out.stdout).into_owned();
        seen.contains(text)
    });
    assert!(shown, "never showed {text:?}: {seen}");
    seen
}

/// The one holder field of the hash `name`.
fn lead_holder_of(server: &RedisServer, name: &str) -> String {
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(name)
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(fields.len(), 1, "{fields:?}");
    fields[0].clone()
}

/// Runs a script on `server` that spins until `SCRIPT KILL` (10 s at most), and returns once
/// every client hears `BUSY` (the script past `busy-reply-threshold`, 50 ms here).
fn busy_script(server: &RedisServer) -> std::thread::JoinHandle<()> {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("busy-reply-threshold")
        .arg(50)
        .query(&mut server.conn())
        .unwrap();
    let mut conn = server.conn();
    let script = std::thread::spawn(move || {
        let spin = "local t = redis.call('time')[1] + 0 \
                    while redis.call('time')[1] + 0 < t + 10 do end return 1";
        let _: redis::RedisResult<i64> = redis::cmd("EVAL").arg(spin).arg(0).query(&mut conn);
    });
    assert!(
        support::wait::eventually_blocking(Duration::from_secs(5), || {
            redis::cmd("PING")
                .query::<String>(&mut server.conn())
                .is_err()
        }),
        "never busy"
    );
    script
}

/// Ends the script of [`busy_script`] (it only reads: `SCRIPT KILL` ends it).
fn end_script(server: &RedisServer, script: std::thread::JoinHandle<()>) {
    let _: redis::RedisResult<()> = redis::cmd("SCRIPT").arg("KILL").query(&mut server.conn());
    script.join().unwrap();
}

/// A script running past `busy-reply-threshold` when `exec` starts is a state that passes: the
/// start is retried within `--wait` (as a wait retries `BUSY`), and the command runs once the
/// script ends; one that outlasts the wait is exit 69, one line naming `BUSY`. Breaks it: the
/// start's `BUSY` taken as the answer (exit 69 at once, `exec --wait 5s` failed in 0.1 s).
#[test]
fn a_busy_script_at_the_start_is_waited_out_within_the_wait() {
    let server = RedisServer::start();
    let script = busy_script(&server);
    let mut child = lockman_at(
        &server.url(),
        &["exec", "--wait", "10s", "job", "--", "true"],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "exec ended while the script ran: {:?}",
        child.wait_with_output()
    );
    end_script(&server, script);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // Outlasting the wait: one line, exit 69, soon after the wait.
    let script = busy_script(&server);
    let started = Instant::now();
    let out = run(&server, &["exec", "--wait", "1s", "job", "--", "true"]);
    let took = started.elapsed();
    end_script(&server, script);
    let (code, line) = one_line(&out);
    assert_eq!(code, 69, "{line}");
    assert!(
        line.contains("busy running a script") && line.contains("BUSY"),
        "{line}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
}

/// `lockman doctor --json` prints one JSON object however it ends: a server busy with a script
/// is a failed `server` check (exit 69) naming `BUSY`; a failure before any diagnosis (a URL
/// that is not Redis's) is `{"status": "error", "error": …}`. Breaks it: the failure written
/// to stderr only, stdout empty.
#[test]
fn doctor_json_prints_an_object_even_when_it_fails() {
    let server = RedisServer::start();
    let script = busy_script(&server);
    let out = run(&server, &["doctor", "--json"]);
    end_script(&server, script);
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON object on stdout");
    assert_eq!(report["status"], "fail", "{report}");
    let check = &report["checks"][0];
    assert_eq!(check["name"], "server", "{report}");
    assert!(check["seen"].as_str().unwrap().contains("BUSY"), "{report}");

    let out = run_at("http://127.0.0.1:1/0", &["doctor", "--json"]);
    assert_ne!(out.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON object on stdout");
    assert_eq!(report["status"], "error", "{report}");
    assert!(!report["error"].as_str().unwrap().is_empty(), "{report}");
    assert_eq!(report["checks"], Value::Array(Vec::new()), "{report}");
}

/// A server loading its dataset (`DEBUG RELOAD`, slowed by `key-load-delay`) answers `LOADING`:
/// a subcommand that does not wait says so in one line, exit 69 (not a connect time-out with
/// network advice), and `exec` retries it within its wait and runs once the data is loaded.
/// Breaks it: `LOADING` reported as redis-rs's `BusyLoading` error, and taken as the answer
/// at the start of `exec`.
#[test]
fn a_server_loading_its_dataset_is_named_and_waited_out_by_exec() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    for (setting, value) in [
        ("key-load-delay", "100"),
        ("loading-process-events-interval-bytes", "1024"),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(setting)
            .arg(value)
            .query(&mut raw)
            .unwrap();
    }
    // 100,000 keys at 100 µs each: 10 s of loading or more (each delay overshoots on a loaded
    // machine), cut short below once `exec` is waiting.
    let _: () = redis::cmd("DEBUG")
        .arg("POPULATE")
        .arg(100_000)
        .query(&mut raw)
        .unwrap();
    let reload = std::thread::spawn(move || {
        let _: redis::RedisResult<()> = redis::cmd("DEBUG").arg("RELOAD").query(&mut raw);
    });
    let loading =
        |server: &RedisServer| match redis::cmd("PING").query::<String>(&mut server.conn()) {
            Err(e) => e.code() == Some("LOADING"),
            Ok(_) => false,
        };
    assert!(
        support::wait::eventually_blocking(Duration::from_secs(5), || loading(&server)),
        "never loading"
    );
    // `latch wait` waits it out as `exec` does (it exited 69 at once).
    let latch = lockman_at(
        &server.url(),
        &["latch", "gate", "wait", "--timeout", "15s"],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let out = run(&server, &["inspect", "job"]);
    let (code, line) = one_line(&out);
    assert!(loading(&server), "the load ended too soon to tell");
    assert_eq!(code, 69, "{line}");
    assert!(
        line.contains("loading its dataset") && line.contains("LOADING"),
        "{line}"
    );
    assert!(!line.contains("network"), "{line}");

    let exec = lockman_at(
        &server.url(),
        &["exec", "--wait", "15s", "job", "--", "true"],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        loading(&server),
        "the load ended before `exec` waited on it"
    );
    // The rest of the load without its delay (CONFIG is served while loading; the delay is read
    // per key), so that the waits' 15 s bound the wait, not how slow this machine makes 100,000
    // short sleeps.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("key-load-delay")
        .arg(0)
        .query(&mut server.conn())
        .unwrap();
    let out = exec.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = latch.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "latch wait: {}", stderr(&out));
    reload.join().unwrap();
}

/// `latch wait` (the CLI's other wait) treats a script running past `busy-reply-threshold` at
/// its start as `exec` does: retried within its wait (`--timeout`, or without one up to
/// `Config::unavailable_after`), answered once the script ends (a latch never set is open);
/// one that outlasts `--timeout` is exit 69, one line naming `BUSY`, soon after it. Breaks it:
/// the start's `BUSY` taken as the answer (exit 69 at once, while the script still ran).
#[test]
fn a_busy_script_at_the_start_of_latch_wait_is_waited_out_within_its_wait() {
    let server = RedisServer::start();
    for timeout in [None, Some("10s")] {
        let script = busy_script(&server);
        let mut args = vec!["latch", "gate", "wait"];
        args.extend(timeout.iter().flat_map(|t| ["--timeout", *t]));
        let mut child = lockman_at(&server.url(), &args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(1_500));
        assert!(
            child.try_wait().unwrap().is_none(),
            "latch wait (--timeout {timeout:?}) ended while the script ran: {:?}",
            child.wait_with_output()
        );
        end_script(&server, script);
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }

    // Outlasting the wait: one line, exit 69, soon after the wait.
    let script = busy_script(&server);
    let started = Instant::now();
    let out = run(&server, &["latch", "gate", "wait", "--timeout", "1s"]);
    let took = started.elapsed();
    end_script(&server, script);
    let (code, line) = one_line(&out);
    assert_eq!(code, 69, "{line}");
    assert!(
        line.contains("busy running a script") && line.contains("BUSY"),
        "{line}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
}
