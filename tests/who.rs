//! Who holds it, who waits, and for how long (issue 38): client records written by three
//! `lockman exec` processes with distinct client names, read back by `lockman inspect`, `ls` and
//! `top --once` (text and JSON); `top` driven in a terminal under tmux; a user without
//! permission for the records still locks. Run with `cargo test --features cli --test who`.
#![cfg(feature = "cli")]

mod support;

use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockman::{Config, LockManager};
use redis::Commands;
use serde_json::Value;
use support::{Options, RedisServer};

const LOCKMAN: &str = env!("CARGO_BIN_EXE_lockman");

/// Short, so that holds are tracked after 0.5 s and records refreshed every second.
const WATCHDOG: &str = "3s";

fn lockman(server: &RedisServer, args: &[&str]) -> Command {
    let mut cmd = Command::new(LOCKMAN);
    cmd.arg("--url")
        .arg(server.url())
        .args(["--watchdog-timeout", WATCHDOG])
        .args(args);
    cmd.env_remove("LOCKMAN_URL")
        .env_remove("REDIS_URL")
        .env_remove("LOCKMAN_CLIENT_NAME");
    cmd
}

fn run(server: &RedisServer, args: &[&str]) -> Output {
    lockman(server, args).output().expect("run lockman")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// A child process killed when dropped, even by a failing assertion (a waiter would otherwise
/// outlive its stopped server, retrying).
struct Killed(Child);

impl Killed {
    fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `lockman --client-name SERVICE exec NAME -- sleep SECS`, in the background.
fn hold(server: &RedisServer, service: &str, name: &str, secs: &str) -> Killed {
    Killed(
        lockman(
            server,
            &["--client-name", service, "exec", name, "--", "sleep", secs],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn lockman exec"),
    )
}

/// The live clients by service, from `lockman ls --json`.
fn services(server: &RedisServer) -> Vec<(String, Value)> {
    let out = run(server, &["ls", "--json"]);
    assert!(out.status.success(), "{out:?}");
    json(&out)
        .as_array()
        .expect("an array")
        .iter()
        .map(|c| {
            (
                c["service"].as_str().unwrap_or_default().to_owned(),
                c.clone(),
            )
        })
        .collect()
}

fn client<'a>(all: &'a [(String, Value)], service: &str) -> &'a Value {
    &all.iter()
        .find(|(s, _)| s == service)
        .unwrap_or_else(|| panic!("no client {service}: {all:?}"))
        .1
}

#[test]
fn three_processes_show_in_inspect_ls_and_top() {
    let server = RedisServer::start();
    // billing holds orders:42 and, through a second process of the same service name, nothing
    // else; shipping holds audit:1 and waits on orders:42; audit waits on orders:42 and on
    // audit:1.
    let billing = hold(&server, "billing", "orders:42", "20");
    let started = Instant::now();
    assert!(support::wait::eventually_blocking(
        Duration::from_secs(10),
        || { run(&server, &["inspect", "orders:42"]).status.success() }
    ));
    // Billing's hold shows in its record (old enough to be renewed) before shipping takes its
    // own, so that the two holds "longest first" compares below are that far apart: more than
    // a record written late on a loaded machine understates an age by (its ages are counted
    // when the write is made, `seen` when it lands).
    assert!(support::wait::eventually_blocking(
        Duration::from_secs(15),
        || {
            services(&server).iter().any(|(s, c)| {
                s == "billing" && c["holds"].as_array().is_some_and(|h| !h.is_empty())
            })
        }
    ));
    let _shipping_holds = hold(&server, "shipping", "audit:1", "20");
    assert!(support::wait::eventually_blocking(
        Duration::from_secs(10),
        || { run(&server, &["inspect", "audit:1"]).status.success() }
    ));
    let _shipping_waits = hold(&server, "shipping", "orders:42", "0");
    let _audit = hold(&server, "audit", "orders:42", "0");
    let _audit2 = hold(&server, "audit", "audit:1", "0");

    // Records refresh every second; holds are listed once they are renewed (0.5 s old).
    let mut all = Vec::new();
    let ready = support::wait::eventually_blocking(Duration::from_secs(15), || {
        all = services(&server);
        let n = |s: &str, f: &str| {
            all.iter()
                .filter(|(x, _)| x == s)
                .map(|(_, c)| c[f].as_array().map_or(0, Vec::len))
                .sum::<usize>()
        };
        n("billing", "holds") == 1
            && n("shipping", "holds") == 1
            && n("shipping", "waits") == 1
            && n("audit", "waits") == 2
    });
    assert!(ready, "records never showed every hold and wait: {all:?}");
    assert_eq!(all.len(), 5, "five lockman processes: {all:?}");

    let billing_c = client(&all, "billing");
    let held = &billing_c["holds"][0];
    assert_eq!(held["name"], "orders:42");
    assert_eq!(held["kind"], "lock");
    assert_eq!(billing_c["pid"], billing.id());
    let held_ms = held["held_ms"].as_u64().unwrap();
    assert!(
        held_ms >= 500 && u128::from(held_ms) <= started.elapsed().as_millis() + 1500,
        "{held_ms} ms"
    );
    let billing_id = billing_c["id"].as_str().unwrap().to_owned();
    assert!(held["holder"].as_str().unwrap().starts_with(&billing_id));

    // inspect: the holder's service, host, pid and time held.
    let out = run(&server, &["inspect", "orders:42", "--json"]);
    let info = json(&out);
    let h = &info["holders"][0];
    assert_eq!(h["client"]["service"], "billing");
    assert_eq!(h["client"]["pid"], billing.id());
    assert!(h["client"]["held_ms"].as_u64().unwrap() >= held_ms);
    let text = stdout(&run(&server, &["inspect", "orders:42"]));
    assert!(
        text.contains(&format!(
            "billing@{}:{}",
            billing_c["host"].as_str().unwrap(),
            billing.id()
        )) && text.contains(", held "),
        "{text}"
    );

    // ls: text, and a pattern keeping only some names.
    let text = stdout(&run(&server, &["ls"]));
    assert!(text.contains("holds  orders:42  lock for"), "{text}");
    assert!(text.contains("waits  audit:1  1 waiter for"), "{text}");
    let out = run(&server, &["ls", "audit:*", "--json"]);
    let only: Vec<Value> = json(&out).as_array().unwrap().clone();
    let names: Vec<&str> = only
        .iter()
        .map(|c| c["service"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["audit", "shipping"], "{only:?}");
    assert!(only.iter().all(|c| {
        c["holds"]
            .as_array()
            .unwrap()
            .iter()
            .chain(c["waits"].as_array().unwrap())
            .all(|n| n["name"].as_str().unwrap().starts_with("audit:"))
    }));

    // top --once: orders:42 has two waiters (shipping, audit) and billing holds it.
    let frame = json(&run(&server, &["top", "--once", "--json"]));
    let waited = frame["waited"].as_array().unwrap();
    assert_eq!(waited[0]["name"], "orders:42", "{frame}");
    assert_eq!(waited[0]["waiters"], 2);
    assert_eq!(waited[0]["held_by"], billing_id.as_str());
    assert_eq!(waited[1]["name"], "audit:1");
    assert_eq!(waited[1]["waiters"], 1);
    let held: Vec<&str> = frame["held"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(held, ["orders:42", "audit:1"], "longest first: {frame}");
    let text = stdout(&run(&server, &["top", "--once"]));
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("orders:42") && l.trim_start().starts_with('2'))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("billing@"), "{line}");
}

/// A spin hold and a spin waiter (`exec --kind spin` in two processes) show in `ls` (the
/// hold's kind `spin`, the wait on its name) and in `top` (one waiter, held by the holder),
/// though the waiter subscribes to nothing.
#[test]
fn spin_holds_and_waiters_show_in_ls_and_top() {
    let server = RedisServer::start();
    let spawn = |service: &str, secs: &str| {
        Killed(
            lockman(
                &server,
                &[
                    "--client-name",
                    service,
                    "exec",
                    "--kind",
                    "spin",
                    "sp:1",
                    "--",
                    "sleep",
                    secs,
                ],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn lockman exec"),
        )
    };
    let _holder = spawn("spinner", "20");
    assert!(support::wait::eventually_blocking(
        Duration::from_secs(10),
        || { run(&server, &["inspect", "sp:1"]).status.success() }
    ));
    let _waiter = spawn("poller", "0");
    let mut all = Vec::new();
    let ready = support::wait::eventually_blocking(Duration::from_secs(15), || {
        all = services(&server);
        let n = |s: &str, f: &str| {
            all.iter()
                .filter(|(x, _)| x == s)
                .map(|(_, c)| c[f].as_array().map_or(0, Vec::len))
                .sum::<usize>()
        };
        n("spinner", "holds") == 1 && n("poller", "waits") == 1
    });
    assert!(ready, "records never showed the hold and the wait: {all:?}");
    let spinner = client(&all, "spinner");
    assert_eq!(spinner["holds"][0]["name"], "sp:1");
    assert_eq!(spinner["holds"][0]["kind"], "spin");
    let poller = client(&all, "poller");
    assert_eq!(poller["waits"][0]["name"], "sp:1", "{poller}");
    let frame = json(&run(&server, &["top", "--once", "--json"]));
    let waited = frame["waited"].as_array().unwrap();
    assert_eq!(waited[0]["name"], "sp:1", "{frame}");
    assert_eq!(waited[0]["waiters"], 1, "{frame}");
    assert_eq!(waited[0]["held_by"], spinner["id"], "{frame}");
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query(&mut server.conn())
        .unwrap();
    assert!(
        channels.iter().all(|c| !c.contains("{sp:1}")),
        "{channels:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_leaves_clients_ls_and_top() {
    let server = RedisServer::start();
    // The `sleep` of a killed `lockman exec` outlives it: short, so it does not linger.
    let mut doomed = hold(&server, "doomed", "gone:1", "20");
    let _survivor = hold(&server, "survivor", "kept:1", "20");
    let mgr = LockManager::start(Config::new(server.url())).await.unwrap();
    let services_of = |clients: &[lockman::ClientInfo]| {
        let mut s: Vec<String> = clients.iter().map(|c| c.service.clone()).collect();
        s.sort();
        s
    };
    // Both listed, each with its hold (records refresh every second; holds show once 0.5 s
    // old): in `clients()`, `ls` and `top`.
    let mut all = Vec::new();
    let listed = support::wait::eventually_blocking(Duration::from_secs(15), || {
        all = services(&server);
        ["doomed", "survivor"].iter().all(|s| {
            all.iter()
                .any(|(x, c)| x == s && c["holds"].as_array().is_some_and(|h| h.len() == 1))
        })
    });
    assert!(listed, "both clients with their hold: {all:?}");
    let doomed_id = client(&all, "doomed")["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let clients = mgr.clients().await.unwrap();
    assert!(
        services_of(&clients).contains(&"doomed".to_string()),
        "{clients:?}"
    );
    let held = |frame: &Value| -> Vec<String> {
        frame["held"]
            .as_array()
            .map(|h| h.iter().map(|h| h["name"].to_string()).collect())
            .unwrap_or_default()
    };
    let frame = json(&run(&server, &["top", "--once", "--json"]));
    assert!(held(&frame).contains(&"\"gone:1\"".to_string()), "{frame}");

    // SIGKILL: no shutdown deletes its record. It expires with the watchdog timeout (3 s);
    // a record that never expired would stay for good, so 15 s tells them apart at any load.
    doomed.0.kill().unwrap();
    doomed.0.wait().unwrap();
    let gone = support::wait::eventually_blocking(Duration::from_secs(15), || {
        all = services(&server);
        !all.iter().any(|(s, _)| s == "doomed")
    });
    assert!(gone, "the killed client is still listed by ls: {all:?}");
    assert!(
        all.iter().any(|(s, _)| s == "survivor"),
        "the live one still is: {all:?}"
    );
    let clients = mgr.clients().await.unwrap();
    let services = services_of(&clients);
    assert!(!services.contains(&"doomed".to_string()), "{clients:?}");
    assert!(services.contains(&"survivor".to_string()), "{clients:?}");
    let frame = json(&run(&server, &["top", "--once", "--json"]));
    let names = held(&frame);
    assert!(!names.contains(&"\"gone:1\"".to_string()), "{frame}");
    assert!(names.contains(&"\"kept:1\"".to_string()), "{frame}");
    // Its record is gone from Redis, not only hidden, and its index entry goes at the next
    // record write of another client (the survivor's, every second).
    let mut raw = server.conn();
    let record = format!("lockman_client:{{lockman}}:{doomed_id}");
    assert_eq!(raw.exists::<_, bool>(&record), Ok(false));
    let mut index: Vec<String> = Vec::new();
    let dropped = support::wait::eventually_blocking(Duration::from_secs(15), || {
        index = raw.zrange("lockman_client:{lockman}", 0, -1).unwrap();
        !index.contains(&doomed_id)
    });
    assert!(dropped, "{doomed_id} still in the index {index:?}");
    mgr.shutdown().await;
}

#[test]
fn top_runs_in_a_terminal_and_quits_on_q() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("SKIPPED: tmux is not installed (apt-get install tmux)");
        return;
    }
    let server = RedisServer::start();
    let _holder = hold(&server, "billing", "orders:42", "20");
    let socket = format!("lockman-who-{}", std::process::id());
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .args(["-L", &socket])
            .args(args)
            .output()
            .expect("run tmux")
    };
    let top = format!(
        "{LOCKMAN} --url {} --watchdog-timeout {WATCHDOG} top; echo TOP-EXITED-$?; sleep 30",
        server.url()
    );
    /// Ends the tmux server (and `top` in it) however the test ends.
    struct Session(String);
    impl Drop for Session {
        fn drop(&mut self) {
            let _ = Command::new("tmux")
                .args(["-L", &self.0, "kill-server"])
                .output();
        }
    }
    let _session = Session(socket.clone());
    let out = tmux(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "80",
        "-y",
        "30",
        "sh",
        "-c",
        &top,
    ]);
    assert!(out.status.success(), "{out:?}");
    let screen = || stdout(&tmux(&["capture-pane", "-p", "-t", "top"]));
    let mut seen = String::new();
    let shown = support::wait::eventually_blocking(Duration::from_secs(15), || {
        seen = screen();
        seen.contains("orders:42") && seen.contains("billing@")
    });
    assert!(shown, "top never showed the hold: {seen}");
    assert!(!seen.contains("TOP-EXITED"), "{seen}");
    tmux(&["send-keys", "-t", "top", "q"]);
    let quit = support::wait::eventually_blocking(Duration::from_secs(5), || {
        seen = screen();
        seen.contains("TOP-EXITED-0")
    });
    assert!(quit, "top did not quit on q: {seen}");
}

/// Every tracing event of this test binary, in one buffer.
fn logs() -> Arc<Mutex<Vec<u8>>> {
    support::logs::global(tracing::Level::WARN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_record_keys_still_locks_and_is_warned_once() {
    let logs = logs();
    let server = RedisServer::start_with(Options {
        args: [
            "--user",
            "nolist",
            "on",
            ">pw",
            "~orders:*",
            "~redisson_lock*",
            "~redisson_unlock_latch:*",
            "&*",
            "+@all",
        ]
        .map(str::to_owned)
        .to_vec(),
        ..Options::default()
    });
    let url = format!("redis://nolist:pw@127.0.0.1:{}/0", server.port());
    let config = Config::new(url)
        .watchdog_timeout(Duration::from_secs(1))
        .client_name("no-record");
    let a = LockManager::start(config.clone()).await.unwrap();
    let b = LockManager::start(config).await.unwrap();
    let guard = a.lock("orders:1").acquire().await.unwrap();
    // Several record refreshes (every third of a second) and renewals.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!guard.is_lost());
    assert!(
        b.lock("orders:1")
            .try_acquire_for(Duration::from_millis(50))
            .await
            .unwrap()
            .is_none()
    );
    guard.release().await.unwrap();
    let again = b.lock("orders:1").try_acquire().await.unwrap();
    assert!(again.is_some());
    drop(again);
    let mut conn = server.conn();
    let records: Vec<String> = conn.keys("lockman_client:*").unwrap();
    assert!(records.is_empty(), "{records:?}");
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    let warnings = text.matches("client record is skipped").count();
    assert_eq!(warnings, 2, "once per manager: {text}");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_has_exact_fields_and_expires_with_the_watchdog() {
    let server = RedisServer::start();
    let config = Config::new(server.url())
        .watchdog_timeout(Duration::from_secs(1))
        .client_name("billing");
    let manager = LockManager::start(config).await.unwrap();
    let id = manager.client_id().hyphenated().to_string();
    let key = format!("lockman_client:{{lockman}}:{id}");
    let mut conn = server.conn();
    assert!(
        support::wait::eventually(Duration::from_secs(5), || conn
            .exists::<_, bool>(&key)
            .unwrap())
        .await
    );
    let fields: std::collections::BTreeMap<String, String> = conn.hgetall(&key).unwrap();
    let names: Vec<&str> = fields.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "holds", "host", "pid", "seen", "service", "started", "version", "waits"
        ]
    );
    assert_eq!(fields["service"], "billing");
    assert_eq!(fields["pid"], std::process::id().to_string());
    let pttl: i64 = conn.pttl(&key).unwrap();
    assert!(pttl > 0 && pttl <= 1000, "{pttl}");
    let score: Option<f64> = conn.zscore("lockman_client:{lockman}", &id).unwrap();
    assert!(score.is_some());
    let clients = manager.clients().await.unwrap();
    assert_eq!(clients.len(), 1);
    assert_eq!(clients[0].service, "billing");
    // A manager that shuts down deletes its record and index member at once (the record,
    // refreshed every 333 ms, would otherwise live 667 ms more at least).
    manager.shutdown().await;
    assert!(!conn.exists::<_, bool>(&key).unwrap());
    let members: Vec<String> = conn.zrange("lockman_client:{lockman}", 0, -1).unwrap();
    assert!(members.is_empty(), "{members:?}");
    let reader = LockManager::start(Config::new(server.url())).await.unwrap();
    assert!(reader.clients().await.unwrap().is_empty());
    reader.shutdown().await;
}

/// Synchronizer waiters are on the board like lock waiters (issue 44): a permit semaphore's
/// waiter (`lockman exec --semaphore`, behind a holder of its only permit), a latch's waiter
/// (`lockman latch wait`) and a plain semaphore's waiter (this process's manager) each show in
/// their process's record, in `ls` and in `top`. Without the shared shell's board writes, only
/// lock actors wrote the board and these waits never showed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronizer_waiters_show_in_ls_and_top() {
    let server = RedisServer::start();
    let spawn = |service: &str, args: &[&str]| {
        let mut all = vec!["--client-name", service];
        all.extend_from_slice(args);
        Killed(
            lockman(&server, &all)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn lockman"),
        )
    };
    let exec = [
        "exec",
        "--semaphore",
        "--permits",
        "1",
        "jobs",
        "--",
        "sleep",
    ];
    let _holder = spawn("worker-a", &[&exec[..], &["20"]].concat());
    let holds_it = support::wait::eventually(Duration::from_secs(10), || {
        services(&server)
            .iter()
            .any(|(s, c)| s == "worker-a" && c["pid"].is_u64())
    })
    .await;
    assert!(holds_it, "worker-a never started");
    // Its permit is taken before the next one asks: one id in the held set.
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let taken = support::wait::eventually(Duration::from_secs(10), || {
        con.zcard::<_, u64>("{jobs}:timeout").unwrap_or(0) == 1
    })
    .await;
    assert!(taken, "worker-a never took its permit");
    let _waiter = spawn("worker-b", &[&exec[..], &["0"]].concat());
    let out = run(&server, &["latch", "gate", "set", "1"]);
    assert!(out.status.success(), "{out:?}");
    let _gate = spawn("gate", &["latch", "gate", "wait"]);

    let manager = LockManager::start(
        Config::new(server.url())
            .client_name("tester")
            .watchdog_timeout(Duration::from_secs(3)),
    )
    .await
    .unwrap();
    let sem = manager.semaphore("slots");
    assert!(sem.try_set_permits(1).await.unwrap());
    let first = sem.acquire(1).await.unwrap();
    let sem2 = sem.clone();
    let second = tokio::spawn(async move { sem2.acquire(1).await });

    let mut all = Vec::new();
    let ready = support::wait::eventually(Duration::from_secs(15), || {
        all = services(&server);
        let waits = |service: &str| -> Vec<String> {
            all.iter()
                .filter(|(s, _)| s == service)
                .flat_map(|(_, c)| c["waits"].as_array().cloned().unwrap_or_default())
                .map(|w| w["name"].as_str().unwrap_or_default().to_owned())
                .collect()
        };
        waits("worker-b") == ["jobs"] && waits("gate") == ["gate"] && waits("tester") == ["slots"]
    })
    .await;
    assert!(
        ready,
        "records never showed every synchronizer wait: {all:?}"
    );

    let frame = json(&run(&server, &["top", "--once", "--json"]));
    let mut waited: Vec<(String, u64)> = frame["waited"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["name"].as_str().unwrap().to_owned(),
                w["waiters"].as_u64().unwrap(),
            )
        })
        .collect();
    waited.sort();
    assert_eq!(
        waited,
        [
            ("gate".to_owned(), 1),
            ("jobs".to_owned(), 1),
            ("slots".to_owned(), 1)
        ],
        "{frame}"
    );
    let text = stdout(&run(&server, &["ls"]));
    assert!(text.contains("waits  jobs  1 waiter for"), "{text}");
    assert!(text.contains("waits  gate  1 waiter for"), "{text}");

    // The wait ends: off the board at the next refresh.
    drop(first);
    let granted = second.await.unwrap().unwrap();
    let gone = support::wait::eventually(Duration::from_secs(10), || {
        services(&server)
            .iter()
            .filter(|(s, _)| s == "tester")
            .all(|(_, c)| c["waits"].as_array().is_some_and(Vec::is_empty))
    })
    .await;
    assert!(gone, "the plain semaphore's wait stayed on the board");
    drop(granted);
    manager.shutdown().await;
}

/// Whether tmux runs here (the terminal tests need it).
fn tmux_installed() -> bool {
    let installed = Command::new("tmux").arg("-V").output().is_ok();
    if !installed {
        eprintln!("SKIPPED: tmux is not installed (apt-get install tmux)");
    }
    installed
}

/// A tmux server of this test's own (`-L`), ended however the test ends.
struct Tmux(String);

impl Tmux {
    fn new(test: &str) -> Self {
        Self(format!("lockman-{test}-{}", std::process::id()))
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.0])
            .args(args)
            .output()
            .expect("run tmux")
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// Issue 57: `lockman top` into a pipe or a file is `--once`: one frame, no screen escapes,
/// and it ends (it used to home and clear a screen every second until killed).
#[test]
fn top_into_a_pipe_prints_one_frame_without_escapes_and_ends() {
    let server = RedisServer::start();
    let _holder = hold(&server, "billing", "orders:42", "20");
    let shown = support::wait::eventually_blocking(Duration::from_secs(10), || {
        stdout(&run(&server, &["top", "--once"])).contains("billing@")
    });
    assert!(shown, "the holder's record never showed");
    let mut top = Killed(
        lockman(&server, &["top"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn lockman top"),
    );
    let ended = support::wait::eventually_blocking(Duration::from_secs(10), || {
        top.0.try_wait().expect("try_wait").is_some()
    });
    assert!(ended, "lockman top with stdout a pipe did not end");
    let status = top.0.wait().expect("top's status");
    assert_eq!(status.code(), Some(0), "{status:?}");
    // One frame is far less than a pipe holds: all of it is there to read after the exit.
    let mut text = String::new();
    std::io::Read::read_to_string(&mut top.0.stdout.take().expect("piped"), &mut text)
        .expect("top's output");
    assert!(!text.contains('\x1b'), "escapes in a pipe: {text:?}");
    assert_eq!(text.matches("lockman top:").count(), 1, "{text}");
    assert!(
        text.contains("orders:42") && text.contains("billing@"),
        "{text}"
    );
}

/// Issue 57: a waiting `exec` whose stderr is not a terminal shows nobody a waiting line, so it
/// sends Redis nothing while it waits: no reads for the line, and no deadlock probe (a waiting
/// `exec` holds nothing, so its wait closes no cycle). It used to send about six scripts a
/// second. Counted on the server: every command from 1.5 s into the wait, for 3 s, but the
/// pub/sub connection's PINGs and this test's own INFO.
#[tokio::test]
async fn a_waiting_exec_without_a_terminal_sends_redis_nothing() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    // Held by a holder of no process: no renewal, no record, nothing else on the server.
    let _: () = redis::pipe()
        .hset("quiet:x", "00000000-0000-0000-0000-000000000000:1", 1)
        .pexpire("quiet:x", 60_000)
        .query(&mut conn)
        .unwrap();
    // The default watchdog timeout: its record is refreshed every 10 s, after the count.
    let _waiter = Killed(
        Command::new(LOCKMAN)
            .args(["--url", &server.url(), "exec", "quiet:x", "--", "true"])
            .env_remove("LOCKMAN_URL")
            .env_remove("REDIS_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn lockman exec"),
    );
    let waiting = support::wait::subscribed(
        &mut conn,
        "redisson_lock__channel:{quiet:x}",
        Duration::from_secs(10),
    )
    .await;
    assert!(waiting, "the exec never waited");
    // Past the second after which a wait is published and probed for deadlocks.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    support::commands::reset_stats(&mut conn);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .unwrap();
    let sent: Vec<(&str, u64)> = info
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter_map(|l| {
            let (command, rest) = l.split_once(":calls=")?;
            Some((command, rest.split(',').next()?.parse().ok()?))
        })
        .filter(|(command, _)| {
            !(matches!(*command, "ping" | "info") || command.starts_with("config"))
        })
        .collect();
    let total: u64 = sent.iter().map(|(_, n)| n).sum();
    assert!(total <= 2, "a waiting exec sent {sent:?} in 3 s");
}

/// Issue 57: the waiting line fits the terminal. In an 80-column terminal, behind a holder
/// whose service name is long, the line (about 130 columns before) stays on one row: no row
/// of the pane, wrapped rows joined (`capture-pane -J`), is longer than 79 columns, and one
/// row shows the line, naming the holder by its service.
#[test]
fn the_waiting_line_fits_an_80_column_terminal() {
    if !tmux_installed() {
        return;
    }
    let server = RedisServer::start();
    let service = "billing-service-with-a-rather-long-name-for-a-service";
    let _holder = hold(&server, service, "orders:tty", "60");
    let known = support::wait::eventually_blocking(Duration::from_secs(10), || {
        stdout(&run(&server, &["ls"])).contains(service)
    });
    assert!(known, "the holder's record never showed");
    let tmux = Tmux::new("waiting-line");
    let waiter = format!(
        "{LOCKMAN} --url {} exec --wait 30s orders:tty -- true; sleep 60",
        server.url()
    );
    let out = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "w",
        "-x",
        "80",
        "-y",
        "24",
        "sh",
        "-c",
        &waiter,
    ]);
    assert!(out.status.success(), "{out:?}");
    let screen = || stdout(&tmux.run(&["capture-pane", "-p", "-J", "-t", "w"]));
    let mut seen = String::new();
    // A few redraws after the holder is named: a line too long would add a row at each.
    let shown = support::wait::eventually_blocking(Duration::from_secs(15), || {
        seen = screen();
        seen.contains("waited 3s")
    });
    assert!(shown, "no waiting line: {seen}");
    let rows: Vec<&str> = seen.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        rows.iter().all(|r| r.chars().count() <= 79),
        "a row wider than the terminal: {seen}"
    );
    assert_eq!(rows.len(), 1, "{seen}");
    assert!(
        rows[0].contains("waiting for \"orders:tty\": held by billing-service"),
        "{seen}"
    );
    assert!(rows[0].ends_with("waited 3s"), "{seen}");
}

/// Group and spin locks in the records: `exec --kind group --member a --member b` and a library
/// group lock over three members show in `ls` (text and JSON) with kind `group`, their member
/// count and first members; `exec --kind spin` with kind `spin`; `top` shows both kinds; a
/// group waiter shows as a wait on the group's name. Catches: a group row without its members,
/// a kind mislabelled (`lock` for a spin hold), a record that a group's members make
/// unreadable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_and_spin_holds_show_their_kind_and_members() {
    let server = RedisServer::start();
    let grouper = Killed(
        lockman(
            &server,
            &[
                "--client-name",
                "grouper",
                "exec",
                "--kind",
                "group",
                "--member",
                "a",
                "--member",
                "b",
                "grp",
                "--",
                "sleep",
                "600",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn"),
    );
    let spinner = Killed(
        lockman(
            &server,
            &[
                "--client-name",
                "spinner",
                "exec",
                "--kind",
                "spin",
                "sp",
                "--",
                "sleep",
                "600",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn"),
    );
    let config = Config::new(server.url())
        .client_name("library")
        .watchdog_timeout(Duration::from_secs(3));
    let mgr = LockManager::start(config).await.unwrap();
    let lib = mgr.group_lock("lib", ["z", "x", "y"]).unwrap();
    let guard = lib.acquire().await.unwrap();
    // The waiter starts only once b is grouper's: started together, the waiter could take b
    // first on a loaded machine, run `true` and leave, and never be seen waiting. The holders'
    // commands last until they are killed at the end, so no hold ends while the records are read.
    let mut raw = server.conn();
    let b_taken = support::wait::eventually(Duration::from_secs(20), || {
        raw.hget::<_, _, Option<String>>("grp", "b")
            .ok()
            .flatten()
            .is_some()
    })
    .await;
    assert!(b_taken, "grouper never took b");
    // A group waiter, in a process of its own: b is grouper's.
    let _waiter = Killed(
        lockman(
            &server,
            &[
                "--client-name",
                "waiter",
                "exec",
                "--kind",
                "group",
                "--member",
                "b",
                "grp",
                "--",
                "true",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn"),
    );
    let mut all = Vec::new();
    let ready = support::wait::eventually_blocking(Duration::from_secs(20), || {
        all = services(&server);
        let n = |s: &str, f: &str| {
            all.iter()
                .filter(|(x, _)| x == s)
                .map(|(_, c)| c[f].as_array().map_or(0, Vec::len))
                .sum::<usize>()
        };
        n("grouper", "holds") == 1
            && n("spinner", "holds") == 1
            && n("library", "holds") == 1
            && n("waiter", "waits") == 1
    });
    assert!(ready, "records never showed every hold and wait: {all:?}");
    let held = &client(&all, "grouper")["holds"][0];
    assert_eq!(held["name"], "grp");
    assert_eq!(held["kind"], "group");
    assert_eq!(held["members_total"], 2);
    assert_eq!(held["members"], serde_json::json!(["a", "b"]));
    let held = &client(&all, "library")["holds"][0];
    assert_eq!(held["kind"], "group");
    assert_eq!(held["holder"], lib.holder_id().as_str());
    assert_eq!(held["members_total"], 3);
    assert_eq!(held["members"], serde_json::json!(["z", "x", "y"]));
    let held = &client(&all, "spinner")["holds"][0];
    assert_eq!(
        (&held["name"], &held["kind"]),
        (&"sp".into(), &"spin".into())
    );
    assert_eq!(
        held.get("members"),
        None,
        "no members for a lock of another kind"
    );
    assert_eq!(client(&all, "waiter")["waits"][0]["name"], "grp");

    let text = stdout(&run(&server, &["ls"]));
    assert!(text.contains("holds  grp  group of 2 (a, b) for"), "{text}");
    assert!(
        text.contains("holds  lib  group of 3 (z, x, y) for"),
        "{text}"
    );
    assert!(text.contains("holds  sp  spin for"), "{text}");
    let frame = json(&run(&server, &["top", "--once", "--json"]));
    let kinds: Vec<(&str, &str)> = frame["held"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["name"].as_str().unwrap(), h["kind"].as_str().unwrap()))
        .collect();
    for want in [("grp", "group"), ("lib", "group"), ("sp", "spin")] {
        assert!(kinds.contains(&want), "{want:?} in {kinds:?}");
    }
    let text = stdout(&run(&server, &["top", "--once"]));
    assert!(text.contains("group") && text.contains("spin"), "{text}");
    guard.release().await.unwrap();
    mgr.shutdown().await;
    drop((grouper, spinner));
}
