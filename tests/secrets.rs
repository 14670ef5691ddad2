//! No password in the open: a server started with a marker password (over TCP and a unix
//! socket's `?pass=`), and every output lockman can produce about it read for the marker: the
//! library's log at TRACE level, `Config`'s `Debug`, errors' `Display` and `Debug`, the
//! diagnosis, the `lockman` command's stdout and stderr (connect errors, malformed URLs, `doctor`
//! in text and JSON, `inspect`, `ls`), and the environment `exec` and `elect` give their command.
//! Run with `cargo test --all-features --test secrets`.
#![cfg(feature = "cli")]

mod support;

#[cfg(feature = "metrics")]
use support::recorder;

use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockman::{Config, LockManager};
use support::{Options, RedisServer};

const LOCKMAN: &str = env!("CARGO_BIN_EXE_lockman");

/// The password of the server, looked for in every output.
const MARKER: &str = "Mk7pQzSecret";

/// Every tracing event of this test binary at TRACE level, in one buffer.
fn logs() -> Arc<Mutex<Vec<u8>>> {
    support::logs::global(tracing::Level::TRACE)
}

/// What was seen, and where: each is checked for the marker at the end.
#[derive(Default)]
struct Seen(Vec<(String, String)>);

impl Seen {
    fn add(&mut self, what: impl Into<String>, text: impl Into<String>) {
        self.0.push((what.into(), text.into()));
    }

    fn output(&mut self, what: &str, out: &Output) {
        self.add(
            format!("{what}: stdout"),
            String::from_utf8_lossy(&out.stdout),
        );
        self.add(
            format!("{what}: stderr"),
            String::from_utf8_lossy(&out.stderr),
        );
    }
}

/// `lockman ARGS…` with no URL or password from the environment but `env`.
fn lockman(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(LOCKMAN);
    cmd.args(["--connect-timeout", "2s"])
        .args(args)
        .env_remove("LOCKMAN_URL")
        .env_remove("REDIS_URL")
        .env_remove("LOCKMAN_PASSWORD")
        .env_remove("LOCKMAN_MASTER_PASSWORD")
        .env_remove("LOCKMAN_PREFIX");
    for (name, value) in env {
        cmd.env(name, value);
    }
    cmd.output().expect("run lockman")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_output_shows_a_password_from_any_url_form() {
    let logs = logs();
    #[cfg(feature = "metrics")]
    let metrics = recorder::recorded();
    let server = RedisServer::start_with(Options {
        password: Some(MARKER.into()),
        unix_socket: true,
        ..Options::default()
    });
    let port = server.port();
    let tcp = format!("redis://:{MARKER}@127.0.0.1:{port}/0");
    let socket = format!("{}&pass={MARKER}", server.unix_url());
    let good = [tcp.clone(), socket.clone()];
    let bad = [
        // Refused: the wrong password (the marker is part of it).
        format!("redis://:{MARKER}x@127.0.0.1:{port}/0"),
        format!("redis://app:{MARKER}@127.0.0.1:{port}/0"),
        // Cannot connect.
        format!("redis+unix:///nonexistent-dir/redis.sock?db=0&pass={MARKER}"),
        format!("unix:///nonexistent-dir/redis.sock?pass={MARKER}"),
        format!("redis://:{MARKER}@127.0.0.1:{}/0", support::closed_port()),
        // Do not parse.
        format!("redis//:{MARKER}@127.0.0.1:{port}"),
        format!(":{MARKER}@127.0.0.1:{port}"),
        format!("redis://:{MARKER}@127.0.0.1:{port}/x"),
        format!("redis://:{MARKER}@127.0.0.1:99999/0"),
        format!("http://app:{MARKER}@127.0.0.1:{port}"),
        format!("redis://:{MARKER}@127.0.0.1:{port}/0?protocol=resp9"),
    ];
    let mut seen = Seen::default();

    // The library, on the URLs that work: a lock taken and released, the diagnosis, the
    // client records.
    for url in &good {
        let config = Config::new(url.as_str()).client_name("secrets");
        seen.add(format!("Config Debug of {url}"), format!("{config:?}"));
        let manager = LockManager::start(config)
            .await
            .expect("the manager starts");
        let guard = manager.lock("secrets:x").acquire().await.unwrap();
        let diagnosis = manager.diagnose().await.expect("a diagnosis");
        seen.add("Diagnosis Debug", format!("{diagnosis:?}"));
        for check in diagnosis.checks.iter() {
            seen.add(
                format!("check {}", check.name),
                format!("{} {}", check.seen, check.advice),
            );
        }
        seen.add(
            "clients",
            format!("{:?}", manager.clients().await.expect("clients")),
        );
        guard.release().await.unwrap();
        manager.shutdown().await;
    }
    // Config::password, with a URL that has none.
    let config = Config::new(format!("redis://127.0.0.1:{port}/0")).password(MARKER);
    seen.add("Config Debug with password()", format!("{config:?}"));
    let manager = LockManager::start(config)
        .await
        .expect("Config::password authenticates");
    manager.shutdown().await;
    // Sentinel and Cluster configs.
    let sentinel = Config::sentinel(
        "mymaster",
        [
            format!("redis://:{MARKER}@10.0.0.1:26379"),
            format!("redis+unix:///run/s.sock?pass={MARKER}"),
        ],
    )
    .master_auth(Some("app"), MARKER);
    seen.add("Sentinel Config Debug", format!("{sentinel:?}"));
    let cluster = Config::cluster([format!("redis://app:{MARKER}@10.0.0.1:7000")]);
    seen.add("Cluster Config Debug", format!("{cluster:?}"));
    seen.add(
        "redacted_url",
        lockman::redacted_url(&format!("redis+unix:///r.sock?pass={MARKER}")),
    );

    // The library's errors for every URL that fails.
    for url in &bad {
        let config = Config::new(url.as_str()).connect_timeout(Duration::from_secs(2));
        seen.add(format!("Config Debug of {url}"), format!("{config:?}"));
        let err = LockManager::start(config)
            .await
            .err()
            .unwrap_or_else(|| panic!("{url} must fail"));
        seen.add(format!("error Display for {url}"), err.to_string());
        seen.add(format!("error Debug for {url}"), format!("{err:?}"));
    }

    // The command: every URL, on the command line and from the environment.
    for url in good.iter().chain(&bad) {
        for args in [
            &["inspect", "x"][..],
            &["doctor"],
            &["doctor", "--json"],
            &["ls"],
        ] {
            let out = lockman(&[&["--url", url.as_str()][..], args].concat(), &[]);
            seen.output(&format!("lockman --url {url} {args:?}"), &out);
        }
        let out = lockman(&["inspect", "x"], &[("LOCKMAN_URL", url)]);
        seen.output(&format!("LOCKMAN_URL={url} lockman inspect"), &out);
    }
    // --password-file and LOCKMAN_PASSWORD, right and wrong.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pw");
    std::fs::write(&file, format!("{MARKER}x\n")).unwrap();
    let plain = format!("redis://127.0.0.1:{port}/0");
    let out = lockman(
        &[
            "--url",
            &plain,
            "--password-file",
            file.to_str().unwrap(),
            "doctor",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(69), "a wrong password: {out:?}");
    seen.output("--password-file (wrong)", &out);
    let wrong = format!("{MARKER}x");
    let out = lockman(
        &["--url", &plain, "inspect", "x"],
        &[("LOCKMAN_PASSWORD", &wrong)],
    );
    assert_eq!(out.status.code(), Some(69), "a wrong password: {out:?}");
    seen.output("LOCKMAN_PASSWORD (wrong)", &out);

    // What `exec` and `elect` hand their command: nothing of lockman's secrets.
    let secrets = [
        ("LOCKMAN_URL", tcp.as_str()),
        ("LOCKMAN_PASSWORD", MARKER),
        ("LOCKMAN_MASTER_PASSWORD", MARKER),
    ];
    let exec = lockman(&["exec", "secrets:env", "--", "env"], &secrets);
    assert_eq!(exec.status.code(), Some(0), "{exec:?}");
    let env = String::from_utf8_lossy(&exec.stdout).into_owned();
    assert!(
        env.contains("LOCKMAN_LOCK=secrets:env"),
        "the command ran: {env}"
    );
    seen.output("exec -- env", &exec);
    let elect = lockman(&["elect", "--once", "secrets:elect", "--", "env"], &secrets);
    assert_eq!(elect.status.code(), Some(0), "{elect:?}");
    assert!(
        String::from_utf8_lossy(&elect.stdout).contains("LOCKMAN_TERM="),
        "the command ran: {elect:?}"
    );
    seen.output("elect -- env", &elect);
    // --keep-env passes them on: the marker is found where it is (the check can fail).
    let kept = lockman(
        &["exec", "--keep-env", "secrets:env", "--", "env"],
        &secrets,
    );
    let kept = String::from_utf8_lossy(&kept.stdout).into_owned();
    for (name, value) in secrets {
        assert!(
            kept.contains(&format!("{name}={value}")),
            "{name} kept: {kept}"
        );
    }

    let log = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(
        log.contains("lock manager started") && log.contains("TRACE"),
        "the log was captured at TRACE level: {log}"
    );
    seen.add("the library's log", log);
    // Every metric's name and labels.
    #[cfg(feature = "metrics")]
    {
        let values = metrics.values.lock().unwrap();
        let samples = metrics.samples.lock().unwrap();
        assert!(!values.is_empty(), "metrics were recorded");
        let keys: Vec<&String> = values.keys().chain(samples.keys()).collect();
        seen.add("metrics", format!("{keys:?}"));
    }
    let mut leaks = Vec::new();
    for (what, text) in &seen.0 {
        // The URLs themselves are in the labels `what`, never in `text`.
        if text.contains(MARKER) {
            leaks.push(format!("{what}:\n{text}"));
        }
    }
    assert!(
        leaks.is_empty(),
        "the password is shown by:\n{}",
        leaks.join("\n---\n")
    );
    // Each output was read: the URL forms that fail were refused, each with a message.
    for (what, text) in &seen.0 {
        if what.starts_with("error Display") {
            assert!(!text.is_empty(), "{what}");
        }
    }
}

/// A sentinel reached over TLS only, watching one TLS-only primary as `mymaster` (quorum 1),
/// and naming it `localhost` (the name the test certificate is for): killed when dropped.
#[cfg(feature = "tls")]
struct TlsSentinel {
    port: u16,
    child: std::process::Child,
    dir: tempfile::TempDir,
}

#[cfg(feature = "tls")]
impl TlsSentinel {
    fn start(certs: &support::certs::TestCerts, primary: u16, primary_password: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = support::free_port();
        let file = |name: &str| certs.file(name).display().to_string();
        let text = format!(
            "port 0\ntls-port {port}\nbind 127.0.0.1\nprotected-mode no\n\
             tls-cert-file {cert}\ntls-key-file {key}\ntls-ca-cert-file {ca}\n\
             tls-auth-clients no\ntls-replication yes\n\
             dir {dir}\nlogfile {dir}/sentinel.log\n\
             sentinel resolve-hostnames yes\nsentinel announce-hostnames yes\n\
             sentinel monitor mymaster localhost {primary} 1\n\
             sentinel auth-pass mymaster {primary_password}\n",
            cert = file("server.pem"),
            key = file("server.key"),
            ca = file("ca.pem"),
            dir = dir.path().display(),
        );
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(&conf, text).expect("write sentinel.conf");
        let child = Command::new(&support::server().bin)
            .arg(&conf)
            .arg("--sentinel")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run the sentinel");
        let sentinel = Self { port, child, dir };
        // Up, and knowing the primary's address.
        let client = redis::Client::build_with_tls(
            format!("rediss://localhost:{port}"),
            certs.redis_certificates(),
        )
        .expect("a tls client");
        let known = support::wait::eventually_blocking(Duration::from_secs(15), || {
            let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(300))
            else {
                return false;
            };
            let addr: Option<Vec<String>> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg("mymaster")
                .query(&mut conn)
                .unwrap_or_default();
            addr.is_some_and(|a| a.first().map(String::as_str) == Some("localhost"))
        });
        assert!(
            known,
            "the sentinel never named the primary: {}",
            sentinel.log()
        );
        sentinel
    }

    fn url(&self) -> String {
        format!("rediss://localhost:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sentinel.log")).unwrap_or_default()
    }
}

#[cfg(feature = "tls")]
impl Drop for TlsSentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sentinels reached over TLS: the primary is reached over TLS too by default (its password
/// never in clear), and `master_tls(false)`, the explicit opt-out, is warned about and here
/// cannot reach the TLS-only primary. Catches the old default (plain TCP to the primary
/// whatever the sentinels' scheme): the first start then fails.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_primary_gets_tls_when_the_sentinels_use_it() {
    let logs = logs();
    let certs = Arc::new(support::certs::TestCerts::generate());
    let primary = RedisServer::start_with(Options {
        tls: Some(certs.clone()),
        password: Some("data-pw".into()),
        ..Options::default()
    });
    let sentinel = TlsSentinel::start(&certs, primary.port(), "data-pw");
    let config = || {
        Config::sentinel("mymaster", [sentinel.url()])
            .master_auth(None, "data-pw")
            .tls_ca_pem(certs.ca_pem.clone())
            .connect_timeout(Duration::from_secs(2))
    };
    let manager = LockManager::start(config())
        .await
        .unwrap_or_else(|e| panic!("TLS to the primary by default: {e}; {}", sentinel.log()));
    assert!(format!("{:?}", config()).contains("master_tls: true"));
    let guard = manager.lock("tls-primary").acquire().await.unwrap();
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg("tls-primary")
        .query(&mut primary.conn())
        .unwrap();
    assert_eq!(fields.len(), 1, "held on the TLS primary: {fields:?}");
    guard.release().await.unwrap();
    manager.shutdown().await;
    let before = logs.lock().unwrap().len();
    let warned = |logs: &Arc<Mutex<Vec<u8>>>| {
        String::from_utf8_lossy(&logs.lock().unwrap()[before..])
            .matches("the sentinels are reached over TLS but the primary in plain text")
            .count()
    };
    assert_eq!(warned(&logs), 0, "no warning while the primary gets TLS");

    let plain = config().master_tls(false);
    assert!(format!("{plain:?}").contains("master_tls: false"));
    let refused = LockManager::start(plain).await;
    assert!(
        refused.is_err(),
        "plain TCP to a TLS-only primary cannot work"
    );
    assert_eq!(warned(&logs), 1, "warned once at start");

    // The command: TLS to the primary by default, `--master-tls=false` warned and refused.
    let ca = certs.file("ca.pem");
    let sentinel_url = sentinel.url();
    let cli = |more: &[&str]| {
        let args = [
            &["--sentinel", "mymaster", "--url", sentinel_url.as_str()][..],
            &["--tls-ca", ca.to_str().unwrap()],
            more,
            &["inspect", "x"],
        ]
        .concat();
        lockman(&args, &[("LOCKMAN_MASTER_PASSWORD", "data-pw")])
    };
    let out = cli(&[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    let out = cli(&["--master-tls"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let out = cli(&["--master-tls=false"]);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        err.starts_with(
            "lockman: warning: the sentinels are reached over TLS but the primary in plain text"
        ),
        "{err}"
    );
}

/// `#insecure` (TLS without certificate and host checks) is logged as a warning once per
/// manager at start, naming the deployment; a verified TLS URL is not.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_tls_is_warned_once_per_manager() {
    let logs = logs();
    let certs = Arc::new(support::certs::TestCerts::generate());
    let server = RedisServer::start_with(Options {
        tls: Some(certs.clone()),
        ..Options::default()
    });
    let port = server.port();
    let warnings = || {
        String::from_utf8_lossy(&logs.lock().unwrap())
            .lines()
            .filter(|l| {
                l.contains("TLS certificate and host checks are OFF")
                    && l.contains(&format!("localhost:{port}/0#insecure"))
                    && l.contains("WARN")
            })
            .count()
    };
    let insecure = format!("rediss://localhost:{port}/#insecure");
    let a = LockManager::start(Config::new(insecure.as_str()))
        .await
        .unwrap();
    let b = LockManager::start(Config::new(insecure.as_str()))
        .await
        .unwrap();
    let guard = a.lock("insecure").acquire().await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(warnings(), 2, "once per manager");
    let verified =
        Config::new(format!("rediss://localhost:{port}/")).tls_ca_pem(certs.ca_pem.clone());
    let c = LockManager::start(verified).await.unwrap();
    let log = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert_eq!(
        log.matches("TLS certificate and host checks are OFF")
            .count(),
        2,
        "none for a verified URL: {log}"
    );
    for manager in [a, b, c] {
        manager.shutdown().await;
    }
}
