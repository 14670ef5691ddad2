//! The `lockman` command, end to end: the binary run as a subprocess against a redis-server
//! started here. Run with `cargo test --features cli --test cli`.
#![cfg(feature = "cli")]

mod support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lockman::{Config, LockManager};
use redis::Commands;
use serde_json::Value;
use support::RedisServer;

const LOCKMAN: &str = env!("CARGO_BIN_EXE_lockman");

fn lockman(server: &RedisServer, args: &[&str]) -> Command {
    let mut cmd = Command::new(LOCKMAN);
    cmd.arg("--url").arg(server.url()).args(args);
    cmd.env_remove("LOCKMAN_URL").env_remove("REDIS_URL");
    cmd
}

fn run(server: &RedisServer, args: &[&str]) -> Output {
    lockman(server, args).output().expect("run lockman")
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("an exit code")
}

/// Sends `signal` (`-TERM`, `-INT`) to a running `lockman` and waits for it to end.
async fn signal_and_wait(child: std::process::Child, signal: &str) -> Output {
    Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap()
}

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::start(Config::new(server.url())).await.unwrap()
}

#[test]
fn exec_passes_on_the_exit_code_and_a_signal_the_shell_way() {
    let server = RedisServer::start();
    let out = run(&server, &["exec", "job", "--", "sh", "-c", "exit 7"]);
    assert_eq!(code(&out), 7);
    let out = run(&server, &["exec", "job", "--", "sh", "-c", "kill -KILL $$"]);
    assert_eq!(code(&out), 128 + 9);
    let out = run(&server, &["exec", "job", "--", "/nonexistent/command"]);
    assert_eq!(code(&out), 127);
    // A file that is there but may not be run: 126, as a shell says it.
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("not-executable");
    std::fs::write(&plain, "#!/bin/sh\nexit 0\n").unwrap();
    let out = run(&server, &["exec", "job", "--", plain.to_str().unwrap()]);
    assert_eq!(code(&out), 126);
    assert_eq!(
        redis::cmd("DBSIZE")
            .query::<u64>(&mut server.conn())
            .unwrap(),
        0,
        "released"
    );
}

#[test]
fn exec_gives_the_command_the_lock_name_and_its_fencing_token() {
    let server = RedisServer::start();
    let script = "echo \"$LOCKMAN_LOCK $LOCKMAN_FENCE\"";
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let out = run(
            &server,
            &[
                "exec", "--kind", "fenced", "orders", "--", "sh", "-c", script,
            ],
        );
        assert_eq!(code(&out), 0);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let (name, token) = stdout.trim().split_once(' ').expect("name and token");
        assert_eq!(name, "orders");
        tokens.push(token.parse::<u64>().expect("a token"));
    }
    // Each token is the counter's new value: the second exec's is greater, and the counter's.
    let counter: u64 = redis::cmd("GET")
        .arg("redisson_lock_token:{orders}")
        .query(&mut server.conn())
        .unwrap();
    assert!(tokens[0] < tokens[1], "{tokens:?}");
    assert_eq!(tokens[1], counter);
}

/// `exec --semaphore` gives the command the semaphore's name in `LOCKMAN_SEMAPHORE` as well as
/// `LOCKMAN_LOCK`, and no token, and gives its permit back when it exits.
#[test]
fn exec_semaphore_gives_the_command_the_semaphores_name() {
    let server = RedisServer::start();
    let script = "echo \"${LOCKMAN_SEMAPHORE:-none} ${LOCKMAN_LOCK:-none} ${LOCKMAN_FENCE:-none}\"";
    let out = run(
        &server,
        &[
            "exec",
            "--semaphore",
            "--permits",
            "3",
            "jobs",
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    assert_eq!(code(&out), 0);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "jobs jobs none"
    );
    let free: String = server.conn().get("jobs").unwrap();
    assert_eq!(free, "3", "the permit came back");
}

/// `--kind non-reentrant` and `--kind non-reentrant-fair` hold RLock's / RFairLock's hash with
/// a count of 1 while the command runs, and release it after.
#[test]
fn exec_takes_the_non_reentrant_kinds() {
    let server = RedisServer::start();
    for kind in ["non-reentrant", "non-reentrant-fair"] {
        let script = "redis-cli -p \"$PORT\" hgetall nr";
        let out = lockman(
            &server,
            &["exec", "--kind", kind, "nr", "--", "sh", "-c", script],
        )
        .env("PORT", server.port().to_string())
        .output()
        .unwrap();
        assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 2, "one holder field and its count: {stdout}");
        assert!(lines[0].contains(':'), "a holder: {stdout}");
        assert_eq!(lines[1], "1", "{kind}: {stdout}");
        let exists: bool = redis::cmd("EXISTS")
            .arg("nr")
            .query(&mut server.conn())
            .unwrap();
        assert!(!exists, "released");
    }
}

/// `--kind group --member a --member b` holds both members of the group hash (three fields each,
/// Redisson's layout) while the command runs and releases them after; `inspect` shows a group's
/// holder; a member another holds keeps `exec` out (exit 75); `--member` needs `--kind group`.
#[tokio::test]
async fn exec_takes_a_group_lock_and_inspect_shows_its_holder() {
    let server = RedisServer::start();
    let script = "redis-cli -p \"$PORT\" hgetall grp";
    let out = lockman(
        &server,
        &[
            "exec", "--kind", "group", "--member", "a", "--member", "b", "grp", "--", "sh", "-c",
            script,
        ],
    )
    .env("PORT", server.port().to_string())
    .output()
    .unwrap();
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 12, "six fields and their values: {stdout}");
    for m in ["a", "b"] {
        let at = lines
            .iter()
            .position(|l| *l == m)
            .expect("the member's field");
        let holder = lines[at + 1];
        for suffix in ["expire_time", "lock_count"] {
            let field = format!("{m}:{holder}:{suffix}");
            assert!(lines.contains(&field.as_str()), "{field}: {stdout}");
        }
    }
    let exists: bool = server.conn().exists("grp").unwrap();
    assert!(!exists, "released");

    let mgr = manager(&server).await;
    let held = mgr.group_lock("grp", ["b", "c"]).unwrap();
    let guard = held.acquire().await.unwrap();
    let out = run(&server, &["inspect", "grp", "--json"]);
    assert_eq!(code(&out), 0);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["kind"], "group");
    assert_eq!(json["holders"][0]["holder"], held.holder_id().as_str());
    assert_eq!(json["holders"][0]["count"], 1);
    let out = run(
        &server,
        &[
            "exec", "--kind", "group", "--member", "a", "--member", "b", "--wait", "300ms", "grp",
            "--", "true",
        ],
    );
    assert_eq!(code(&out), 75, "b is taken");
    let out = run(
        &server,
        &[
            "exec", "--kind", "group", "--member", "a", "grp", "--", "true",
        ],
    );
    assert_eq!(code(&out), 0, "a is free");
    guard.release().await.unwrap();
    let out = run(&server, &["exec", "--member", "a", "grp", "--", "true"]);
    assert_ne!(code(&out), 0, "--member without --kind group is refused");
    let out = run(&server, &["exec", "--kind", "group", "grp", "--", "true"]);
    assert_ne!(code(&out), 0, "a group with no member is refused");
}

/// `--kind spin` holds the lock's hash with a count of 1 while the command runs (the spin lock's
/// keys are the lock's) and releases it after; `inspect` shows such a hold as a plain lock
/// (nothing in Redis tells the two apart, as in Redisson).
#[test]
fn exec_takes_the_spin_lock() {
    let server = RedisServer::start();
    let script = "redis-cli -p \"$PORT\" hgetall sp; redis-cli -p \"$PORT\" pubsub channels";
    let out = lockman(
        &server,
        &["exec", "--kind", "spin", "sp", "--", "sh", "-c", script],
    )
    .env("PORT", server.port().to_string())
    .output()
    .unwrap();
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.len() >= 2, "{stdout}");
    assert!(lines[0].contains(':'), "a holder: {stdout}");
    assert_eq!(lines[1], "1", "{stdout}");
    assert!(!stdout.contains("{sp}"), "no channel of the name: {stdout}");
    let exists: bool = redis::cmd("EXISTS")
        .arg("sp")
        .query(&mut server.conn())
        .unwrap();
    assert!(!exists, "released");
}

/// `--prefix app1:` maps every name as Redisson's `PrefixNameMapper` does: `exec` holds the hash
/// `app1:report` (not `report`), and `inspect report` finds it and shows the name unmapped.
#[tokio::test]
async fn the_prefix_option_maps_names() {
    let server = RedisServer::start();
    let script = "redis-cli -p \"$PORT\" exists app1:report report";
    let out = lockman(
        &server,
        &[
            "--prefix", "app1:", "exec", "report", "--", "sh", "-c", script,
        ],
    )
    .env("PORT", server.port().to_string())
    .output()
    .unwrap();
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "1",
        "only app1:report"
    );

    // An election too: the command runs while `app1:leader` is the fenced lock that leads.
    let script =
        "redis-cli -p \"$PORT\" exists app1:leader leader \"redisson_lock_token:{app1:leader}\"";
    let out = lockman(
        &server,
        &[
            "--prefix", "app1:", "elect", "--once", "leader", "--", "sh", "-c", script,
        ],
    )
    .env("PORT", server.port().to_string())
    .output()
    .unwrap();
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "2",
        "only app1:leader and its token"
    );

    let mgr = LockManager::start(lockman::Config::new(server.url()).name_prefix("app1:"))
        .await
        .unwrap();
    let _held = mgr.lock("report").acquire().await.unwrap();
    let shown = run(
        &server,
        &["--prefix", "app1:", "inspect", "report", "--json"],
    );
    assert_eq!(code(&shown), 0);
    let json = String::from_utf8_lossy(&shown.stdout);
    assert!(json.contains("\"name\":\"report\""), "{json}");
    assert!(json.contains(&mgr.lock("x").holder_id()[..36]), "{json}");
    let unprefixed = run(&server, &["inspect", "report"]);
    assert_eq!(
        code(&unprefixed),
        1,
        "without the prefix: another, free name"
    );
    mgr.shutdown().await;
}

#[test]
fn two_concurrent_execs_on_one_name_never_overlap() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    std::fs::write(&counter, "0").unwrap();
    // Read, pause, write: two of these at once would lose an increment.
    let bump = format!(
        "v=$(cat {c}); sleep 0.02; echo $((v + 1)) > {c}",
        c = counter.display()
    );
    let rounds = 10;
    let loops: Vec<_> = (0..2)
        .map(|_| {
            let (url, bump) = (server.url(), bump.clone());
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    let status = Command::new(LOCKMAN)
                        .args(["--url", &url, "exec", "counter", "--", "sh", "-c", &bump])
                        .status()
                        .unwrap();
                    assert!(status.success());
                }
            })
        })
        .collect();
    for l in loops {
        l.join().unwrap();
    }
    let total: u32 = std::fs::read_to_string(&counter)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(total, 2 * rounds);
}

#[tokio::test]
async fn wait_runs_out_with_its_own_code_and_one_line() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let _held = mgr.lock("busy").acquire().await.unwrap();
    let started = Instant::now();
    let out = run(&server, &["exec", "--wait", "300ms", "busy", "--", "true"]);
    let took = started.elapsed();
    assert_eq!(code(&out), 75);
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("not acquired within 300ms"), "{stderr}");
}

/// Runs `lockman exec` with a 600 ms watchdog on `name`, deletes the lock once it is held (the
/// watchdog then finds it gone), and returns how `lockman` ended and how long after the delete.
async fn exec_losing(args: &[&str], name: &str) -> (Output, Duration) {
    let server = RedisServer::start();
    let mut all = vec!["--watchdog-timeout", "600ms", "exec"];
    all.extend_from_slice(args);
    let child = lockman(&server, &all)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut raw = server.conn();
    let held = || raw.exists::<_, bool>(name).unwrap();
    assert!(support::wait::eventually(Duration::from_secs(5), held).await);
    let deleted = Instant::now();
    let _: () = server.conn().del(name).unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    (out, deleted.elapsed())
}

#[tokio::test]
async fn a_lost_lock_stops_the_command() {
    let (out, took) = exec_losing(&["lost", "--", "sleep", "30"], "lost").await;
    assert_eq!(out.status.code(), Some(73));
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("lost"));
}

#[tokio::test]
async fn on_lost_warn_lets_the_command_finish() {
    let args = [
        "--on-lost",
        "warn",
        "w",
        "--",
        "sh",
        "-c",
        "sleep 1.5; exit 4",
    ];
    let (out, _) = exec_losing(&args, "w").await;
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("goes on"));
}

#[tokio::test]
async fn sigterm_is_forwarded_and_the_lock_released_after_the_command_exits() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let trapped = dir.path().join("trapped");
    // The file says the trap is set: a TERM before it would end the shell with 143, not 42.
    let script = format!(
        "trap 'exit 42' TERM; touch {}; sleep 30 & wait",
        trapped.display()
    );
    let child = lockman(&server, &["exec", "sig", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let mut raw = server.conn();
    assert!(
        support::wait::eventually(Duration::from_secs(5), || raw
            .exists::<_, bool>("sig")
            .unwrap())
        .await
    );
    support::wait::until("the trap is set", || trapped.exists()).await;
    let out = signal_and_wait(child, "-TERM").await;
    assert_eq!(out.status.code(), Some(42));
    assert!(!raw.exists::<_, bool>("sig").unwrap(), "released");
}

/// Whether `pid` runs: neither gone nor a zombie (a dead process whose new parent has not
/// reaped it yet still has its /proc entry).
#[cfg(target_os = "linux")]
fn running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) state …": the state follows the last ')' (comm may hold one).
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, None | Some('Z' | 'X'))
}

/// Whatever a test started and must not leave behind if it fails half-way: SIGKILLed on drop.
#[cfg(target_os = "linux")]
struct Reap {
    lockman: std::process::Child,
    command: Option<u32>,
}

#[cfg(target_os = "linux")]
impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.lockman.kill();
        let _ = self.lockman.wait();
        if let Some(pid) = self.command.filter(|pid| running(*pid)) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

/// A `lockman exec` killed with SIGKILL (as the OOM killer kills) takes its command with it:
/// otherwise the command runs on unguarded once the lock expires, beside the next `exec`'s.
/// Linux only (PR_SET_PDEATHSIG); the same for a permit (`--semaphore`).
#[cfg(target_os = "linux")]
#[test]
fn a_command_dies_with_its_killed_lockman() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    for (name, extra) in [
        ("orphan", &[][..]),
        ("orphan-sem", &["--semaphore", "--permits", "1"][..]),
    ] {
        let pidfile = dir.path().join(name);
        // `exec`: the pid written is the sleeping process's own.
        let script = format!("echo $$ > {}; exec sleep 120", pidfile.display());
        let mut args = vec!["exec"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[name, "--", "sh", "-c", &script]);
        let mut reap = Reap {
            lockman: lockman(&server, &args).spawn().unwrap(),
            command: None,
        };
        let started = support::wait::eventually_blocking(Duration::from_secs(10), || {
            reap.command = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            reap.command.is_some()
        });
        assert!(started, "{name}: the command never wrote its pid");
        let pid = reap.command.unwrap_or_default();
        assert!(running(pid), "{name}: the command runs");
        reap.lockman.kill().unwrap();
        reap.lockman.wait().unwrap();
        let gone = support::wait::eventually_blocking(Duration::from_secs(5), || !running(pid));
        assert!(
            gone,
            "{name}: the command {pid} outlived its lockman by 5 s"
        );
    }
}

#[tokio::test]
async fn inspect_shows_every_kind_in_text_and_json() {
    let server = RedisServer::start();
    let mgr = manager(&server).await;
    let other = manager(&server).await;

    let free = run(&server, &["inspect", "nothing"]);
    assert_eq!(code(&free), 1);
    assert!(String::from_utf8_lossy(&free.stdout).contains("state:   free"));

    let plain = mgr.lock("plain");
    let _p1 = plain.acquire().await.unwrap();
    let _p2 = plain.acquire().await.unwrap();
    let fenced = mgr.fenced_lock("fenced").acquire().await.unwrap();
    let rw = mgr.read_write_lock("rw");
    let _r = rw.read().acquire().await.unwrap();
    let fair_holder = mgr.fair_lock("fair").acquire().await.unwrap();
    let fair_waiter = {
        let lock = other.fair_lock("fair");
        tokio::spawn(async move { lock.try_acquire_for(Duration::from_secs(20)).await })
    };
    let mut raw = server.conn();
    assert!(
        support::wait::eventually(Duration::from_secs(3), || raw
            .llen::<_, u64>("redisson_lock_queue:{fair}")
            .unwrap()
            == 1)
        .await
    );

    let json = |name: &str| -> Value {
        let out = run(&server, &["inspect", name, "--json"]);
        assert_eq!(code(&out), 0, "{name} is held");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let p = json("plain");
    assert_eq!(p["kind"], "plain");
    assert_eq!(p["holders"][0]["holder"], plain.holder_id().as_str());
    assert_eq!(p["holders"][0]["count"], 2);
    assert!(p["ttl_ms"].as_u64().unwrap() > 20_000);
    let f = json("fenced");
    assert_eq!(f["kind"], "fenced");
    assert_eq!(f["token"], fenced.token());
    let r = json("rw");
    assert_eq!(r["kind"], "read-write");
    assert_eq!(r["mode"], "read");
    assert_eq!(r["holders"][0]["write"], false);
    let q = json("fair");
    assert_eq!(q["kind"], "fair");
    assert_eq!(q["holders"][0]["holder"], fair_holder.holder_id());
    let queued = q["queue"][0]["times_out_in_ms"].as_u64().unwrap();
    assert!(queued > 1_000, "{queued}");

    let text = String::from_utf8_lossy(&run(&server, &["inspect", "rw"]).stdout).to_string();
    assert!(
        text.contains("kind:    read-write") && text.contains("mode:    read"),
        "{text}"
    );
    assert!(text.contains("(read)"), "{text}");
    let text = String::from_utf8_lossy(&run(&server, &["inspect", "fair"]).stdout).to_string();
    assert!(text.contains("queued:  1."), "{text}");
    let text = String::from_utf8_lossy(&run(&server, &["inspect", "plain"]).stdout).to_string();
    assert!(
        text.contains("×2") && text.contains("state:   held, ttl"),
        "{text}"
    );

    fair_holder.release().await.unwrap();
    assert!(fair_waiter.await.unwrap().unwrap().is_some());
    let _ = fenced;
}

#[tokio::test]
async fn unlock_force_wakes_a_waiter() {
    let server = RedisServer::start();
    let holder = manager(&server).await;
    let waiter_mgr = manager(&server).await;
    let _held = holder.lock("stuck").acquire().await.unwrap();
    let waiter = {
        let lock = waiter_mgr.lock("stuck");
        tokio::spawn(async move {
            let g = lock.acquire().await.unwrap();
            let at = Instant::now();
            g.release().await.unwrap();
            at
        })
    };
    // The waiter found the lock taken and listens for its release.
    let mut raw = server.conn();
    support::wait::subscribers(&mut raw, "redisson_lock__channel:{stuck}", 1).await;
    let before = Instant::now();
    let out = run(&server, &["unlock", "--force", "--yes", "stuck"]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let woken = waiter.await.unwrap();
    // The watchdog keeps the holder's TTL near 30 s: only the unlock message can explain this.
    assert!(woken.duration_since(before) < Duration::from_secs(3));
    let again = run(&server, &["unlock", "--force", "--yes", "stuck"]);
    assert_eq!(code(&again), 1, "nothing left to unlock");
    let usage = run(&server, &["unlock", "stuck"]);
    assert_eq!(code(&usage), 2, "--force is required");
}

#[test]
fn an_unreachable_server_is_one_line_and_its_own_code() {
    let port = support::closed_port();
    let out = Command::new(LOCKMAN)
        .args([
            "--url",
            &format!("redis://127.0.0.1:{port}/0"),
            "--connect-timeout",
            "1s",
            "inspect",
            "x",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}

/// `watch` on a server without keyspace notifications (the default) says so on stderr, and
/// what it shows instead (releases only).
#[test]
fn watch_says_so_when_keyspace_notifications_are_off() {
    let server = RedisServer::start();
    let mut child = lockman(&server, &["watch", "quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let said = rx.recv_timeout(Duration::from_secs(10));
    // How `watch` ends on SIGINT is `cli_errors.rs`'s; here it has said what it had to.
    child.kill().unwrap();
    child.wait().unwrap();
    let said = said.expect("a line on stderr");
    assert!(said.contains("keyspace notifications are off"), "{said}");
    assert!(said.contains("showing releases only"), "{said}");
}

#[tokio::test]
async fn watch_prints_acquire_and_release_until_interrupted() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Kghx")
        .query(&mut raw)
        .unwrap();
    let mut child = lockman(&server, &["watch", "seen"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Its output as it comes, read on a thread: each step below waits for the line it caused.
    let printed = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let (stdout, printed) = (child.stdout.take().unwrap(), printed.clone());
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let mut text = printed.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        })
    };
    let shows = |what: &'static str| {
        let printed = printed.clone();
        move || printed.lock().unwrap().contains(what)
    };
    assert!(
        support::wait::subscribed(&mut raw, "__keyspace@0__:seen", Duration::from_secs(10)).await,
        "watch subscribed"
    );
    let mgr = manager(&server).await;
    let guard = mgr.lock("seen").acquire().await.unwrap();
    support::wait::until("watch printed the acquire", shows("held by")).await;
    guard.release().await.unwrap();
    // Its last line for the release (the keyspace events come first): watch is back to
    // waiting, where an interrupt ends it. (A SIGINT while it prints an event is lost:
    // src/bin/lockman/watch.rs makes a new `ctrl_c()` each turn of its loop.)
    support::wait::until(
        "watch printed the release",
        shows("released: a waiter may go"),
    )
    .await;
    let out = signal_and_wait(child, "-INT").await;
    assert_eq!(out.status.code(), Some(0));
    reader.join().unwrap();
    let text = printed.lock().unwrap().clone();
    let acquired = text.find("acquired").expect(&text);
    let held = text.find("held by").expect(&text);
    let released = text.find("released: a waiter may go").expect(&text);
    assert!(acquired < held && held < released, "{text}");
}

#[test]
fn exec_and_inspect_through_sentinel_and_on_a_cluster() {
    use support::cluster::Cluster;
    use support::sentinel::{DATA_PASSWORD, MASTER, SentinelGroup};

    let group = SentinelGroup::start();
    let out = Command::new(LOCKMAN)
        .args([
            "--sentinel",
            MASTER,
            "--url",
            &group.sentinel_urls().join(","),
        ])
        .env("LOCKMAN_MASTER_PASSWORD", DATA_PASSWORD)
        .args(["exec", "via-sentinel", "--", "sh", "-c", "exit 5"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 5, "{}", String::from_utf8_lossy(&out.stderr));

    let cluster = Cluster::start(3, 0);
    let seeds = cluster.urls().join(",");
    let holder = Command::new(LOCKMAN)
        .args([
            "--cluster",
            "--url",
            &seeds,
            "exec",
            "on-cluster",
            "--",
            "sleep",
            "3",
        ])
        .spawn()
        .unwrap();
    let started = Instant::now();
    let inspected = loop {
        let out = Command::new(LOCKMAN)
            .args([
                "--cluster",
                "--url",
                &seeds,
                "inspect",
                "on-cluster",
                "--json",
            ])
            .output()
            .unwrap();
        if code(&out) == 0 || started.elapsed() > Duration::from_secs(10) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        code(&inspected),
        0,
        "held: {}",
        String::from_utf8_lossy(&inspected.stderr)
    );
    let info: Value = serde_json::from_slice(&inspected.stdout).unwrap();
    assert_eq!(info["holders"].as_array().map(Vec::len), Some(1));
    let out = holder.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let watch = Command::new(LOCKMAN)
        .args(["--cluster", "--url", &seeds, "watch", "on-cluster"])
        .output()
        .unwrap();
    assert_eq!(code(&watch), 2, "watch wants one server");
}

#[test]
fn exec_semaphore_runs_at_most_n_commands_at_once_across_processes() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (inside, most) = (dir.path().join("inside"), dir.path().join("most"));
    // Each command notes how many are inside (a file per command), and the most seen.
    let body = format!(
        "touch {d}/in.$$; n=$(ls {d} | grep -c '^in\\.'); \
         m=$(cat {m} 2>/dev/null || echo 0); [ $n -gt $m ] && echo $n > {m}; \
         sleep 0.3; rm {d}/in.$$",
        d = inside.display(),
        m = most.display()
    );
    std::fs::create_dir(&inside).unwrap();
    let runs: Vec<_> = (0..6)
        .map(|_| {
            let (url, body) = (server.url(), body.clone());
            std::thread::spawn(move || {
                Command::new(LOCKMAN)
                    .args([
                        "--url",
                        &url,
                        "exec",
                        "--semaphore",
                        "--permits",
                        "2",
                        "jobs",
                    ])
                    .args(["--", "sh", "-c", &body])
                    .status()
                    .unwrap()
            })
        })
        .collect();
    for r in runs {
        assert!(r.join().unwrap().success());
    }
    let most: u32 = std::fs::read_to_string(&most)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        (1..=2).contains(&most),
        "{most} commands inside a semaphore of 2"
    );
    let mut raw = server.conn();
    assert_eq!(
        raw.get::<_, String>("jobs").unwrap(),
        "2",
        "every permit came back"
    );
    assert_eq!(raw.zcard::<_, u32>("{jobs}:timeout").unwrap(), 0);
}

#[tokio::test]
async fn exec_semaphore_stops_the_command_when_its_permit_is_lost() {
    let server = RedisServer::start();
    let child = lockman(
        &server,
        &[
            "--watchdog-timeout",
            "600ms",
            "exec",
            "--semaphore",
            "--permits",
            "1",
            "lost",
        ],
    )
    .args(["--", "sleep", "30"])
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut raw = server.conn();
    let held = || raw.zcard::<_, u32>("{lost}:timeout").unwrap() == 1;
    assert!(support::wait::eventually(Duration::from_secs(5), held).await);
    let _: () = server.conn().del("{lost}:timeout").unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(73));
    assert!(String::from_utf8_lossy(&out.stderr).contains("lost"));
}

#[tokio::test]
async fn semaphore_and_latch_commands_change_and_show_them() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let out = run(&server, &["semaphore", "pool", "--json"]);
    assert_eq!(code(&out), 1, "never set");
    let out = run(
        &server,
        &["semaphore", "pool", "--set", "4", "--add", "-1", "--json"],
    );
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["count"], 3);
    assert_eq!(raw.get::<_, String>("pool").unwrap(), "3");

    // Held permits show with whose they are, in inspect too.
    let mgr = manager(&server).await;
    let psem = mgr.permit_semaphore("pool");
    let guard = psem.acquire(2).await.unwrap();
    let out = run(&server, &["inspect", "pool", "--json"]);
    assert_eq!(code(&out), 0);
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["count"], 1);
    let held = shown["held"].as_array().unwrap();
    assert_eq!(held.len(), 2);
    let client = mgr.client_id().simple().to_string();
    assert_eq!(held[0]["client"], client[..16]);
    assert!(held[0]["expires_in_ms"].as_u64().unwrap() > 20_000);
    let text = String::from_utf8_lossy(&run(&server, &["inspect", "pool"]).stdout).to_string();
    assert!(text.contains("held:    2 permits"), "{text}");
    let out = run(&server, &["semaphore", "pool", "--drain"]);
    assert_eq!(code(&out), 0);
    assert_eq!(raw.get::<_, String>("pool").unwrap(), "0");
    guard.release().await.unwrap();

    // A latch: set, counted down by the command, awaited with a time-out.
    assert_eq!(code(&run(&server, &["latch", "go", "set", "2"])), 0);
    assert_eq!(
        code(&run(&server, &["latch", "go", "set", "5"])),
        1,
        "set once"
    );
    assert_eq!(raw.get::<_, String>("go").unwrap(), "2");
    let out = run(&server, &["latch", "go", "wait", "--timeout", "200ms"]);
    assert_eq!(code(&out), 75);
    let waiter = lockman(&server, &["latch", "go", "wait", "--timeout", "20s"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = run(&server, &["latch", "go", "count-down"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
    mgr.count_down_latch("go").count_down().await.unwrap();
    let done = tokio::task::spawn_blocking(move || waiter.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.status.code(), Some(0));
    let shown: Value =
        serde_json::from_slice(&run(&server, &["latch", "go", "--json"]).stdout).unwrap();
    assert_eq!(shown["count"], Value::Null, "open: no key");
    let out = run(&server, &["latch", "go", "set", "0"]);
    assert_eq!(code(&out), 2, "a count of zero is bad usage");
    mgr.shutdown().await;
}

/// The terms and pids `elect`'s command wrote, one line per start: "term pid".
#[cfg(target_os = "linux")]
fn starts(file: &std::path::Path) -> Vec<(u64, u32)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (term, pid) = l.split_once(' ')?;
            Some((term.parse().ok()?, pid.parse().ok()?))
        })
        .collect()
}

/// `elect` runs its command with the term; a lost lead stops it (SIGTERM) and a new term
/// restarts it; `leader` shows the leader; a SIGKILLed `elect` takes its command with it.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn elect_restarts_its_command_each_term_and_leader_shows_it() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let out = run(&server, &["leader", "jobs", "--json"]);
    assert_eq!(code(&out), 1);
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["leader"], Value::Null);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("starts");
    let script = format!(
        "echo \"$LOCKMAN_TERM $$\" >> {}; exec sleep 120",
        file.display()
    );
    let args = [
        "--watchdog-timeout",
        "600ms",
        "elect",
        "jobs",
        "--",
        "sh",
        "-c",
        &script,
    ];
    let mut reap = Reap {
        lockman: lockman(&server, &args)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
        command: None,
    };
    assert!(support::wait::eventually(Duration::from_secs(10), || starts(&file).len() == 1).await);
    let (term1, pid1) = starts(&file)[0];
    assert_eq!(
        raw.get::<_, u64>("redisson_lock_token:{jobs}").unwrap(),
        term1
    );
    let out = run(&server, &["leader", "jobs", "--json"]);
    assert_eq!(code(&out), 0);
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["term"], term1);

    // The lead is lost (its key gone): the command is stopped, and restarted in a new term.
    let _: () = raw.del("jobs").unwrap();
    assert!(support::wait::eventually(Duration::from_secs(10), || starts(&file).len() == 2).await);
    let (term2, pid2) = starts(&file)[1];
    assert!(term2 > term1);
    assert!(!running(pid1), "the first term's command still runs");
    reap.command = Some(pid2);
    reap.lockman.kill().unwrap();
    reap.lockman.wait().unwrap();
    let gone = support::wait::eventually_blocking(Duration::from_secs(5), || !running(pid2));
    assert!(gone, "the command {pid2} outlived its lockman");
}

/// `elect` gives its command the election's name (`LOCKMAN_ELECTION`) and the term
/// (`LOCKMAN_TERM`, the fenced lock's token); a command that exits by itself makes lockman
/// resign (the lock is gone at once, not at its expiry) and exit with the command's code.
#[test]
fn elect_gives_the_command_its_election_and_term_and_exits_with_its_code_resigned() {
    let server = RedisServer::start();
    let script = "echo \"$LOCKMAN_ELECTION $LOCKMAN_TERM\"; exit 5";
    let out = run(&server, &["elect", "jobs", "--", "sh", "-c", script]);
    assert_eq!(code(&out), 5, "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (name, term) = stdout.trim().split_once(' ').expect("name and term");
    assert_eq!(name, "jobs");
    let mut raw = server.conn();
    let counter: u64 = raw.get("redisson_lock_token:{jobs}").unwrap();
    assert_eq!(term.parse::<u64>().expect("a term"), counter);
    assert!(!raw.exists::<_, bool>("jobs").unwrap(), "not resigned");
}

#[tokio::test]
async fn elect_once_exits_73_when_the_lead_is_lost() {
    let server = RedisServer::start();
    let args = [
        "--watchdog-timeout",
        "600ms",
        "elect",
        "--once",
        "j1",
        "--",
        "sleep",
        "30",
    ];
    let child = lockman(&server, &args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut raw = server.conn();
    assert!(
        support::wait::eventually(Duration::from_secs(5), || raw
            .exists::<_, bool>("j1")
            .unwrap())
        .await
    );
    let _: () = raw.del("j1").unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(73));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stopping the command"));
}

/// A name closed by its lock-delay alone (the hash gone, as after an expiry, an eviction or a
/// Redisson force unlock; the delay key left, docs/protocol.md "Lock-delay"): `inspect` says
/// it is closed and for how long (exit 0, `delay_ms`), `exec --lock-delay` timing out behind
/// it says why (exit 75), and `unlock --force` deletes the delay key (exit 0), after which
/// `exec` takes the name at once. Breaks it: the command blind to the delay key, as it was
/// (`inspect` "free" with exit 1, `exec`'s bare "not acquired within", `unlock --force` "not
/// locked" with exit 1 and the delay key left).
#[test]
fn a_name_closed_by_its_lock_delay_is_shown_explained_and_opened() {
    let server = RedisServer::start();
    let mut raw = server.conn();
    let delay_key = "lockman_delay:{job}";
    let _: () = redis::cmd("SET")
        .arg(delay_key)
        .arg("3f1c3c1e-8a8e-4d55-9d1e-2f3c7a9b6e10:1")
        .arg("PX")
        .arg(60_000)
        .query(&mut raw)
        .unwrap();

    let out = run(&server, &["inspect", "job"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(code(&out), 0, "not free: {text}");
    assert!(
        text.contains("state:   closed by its lock-delay for"),
        "{text}"
    );
    let out = run(&server, &["inspect", "job", "--json"]);
    assert_eq!(code(&out), 0);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["held"], false, "{json}");
    let left = json["delay_ms"].as_u64().expect("delay_ms");
    assert!((40_000..=60_000).contains(&left), "{json}");

    let out = run(
        &server,
        &[
            "--lock-delay",
            "60s",
            "exec",
            "--wait",
            "300ms",
            "job",
            "--",
            "true",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(code(&out), 75, "{err}");
    assert!(
        err.contains("not acquired within") && err.contains("its lock-delay closes it for"),
        "{err}"
    );
    // The wait wrote nothing: no hash, the delay key as it was.
    assert!(!raw.exists::<_, bool>("job").unwrap());
    assert!(raw.pttl::<_, i64>(delay_key).unwrap() > 40_000);

    let out = run(&server, &["unlock", "--force", "--yes", "job"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(code(&out), 0, "{text}");
    assert!(
        text.contains("opened \"job\": deleted its lock-delay ("),
        "{text}"
    );
    assert!(!raw.exists::<_, bool>(delay_key).unwrap(), "delay key left");
    assert!(!raw.exists::<_, bool>("job").unwrap());
    let again = run(&server, &["unlock", "--force", "--yes", "job"]);
    assert_eq!(code(&again), 1, "nothing left to open");
    assert_eq!(code(&run(&server, &["inspect", "job"])), 1, "free now");

    // Open: taken at once, and its release leaves neither key.
    let out = run(
        &server,
        &[
            "--lock-delay",
            "60s",
            "exec",
            "--wait",
            "2s",
            "job",
            "--",
            "true",
        ],
    );
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!raw.exists::<_, bool>("job").unwrap());
    assert!(!raw.exists::<_, bool>(delay_key).unwrap());
}

/// `unlock --force` on a reentrant lock held with a lock-delay deletes the hash and then the
/// delay key (the library's `force_unlock`, Redisson's semantics, leaves the delay key), so a
/// waiter with the same 60 s delay takes the name at once; `inspect` shows the delay beside
/// the hold. Breaks it: the delay key left by the force unlock (the waiter waits out 60 s past
/// the hold's expiry, and times out here after 20 s), or woken only once, before the delay key
/// is gone.
#[tokio::test]
async fn unlock_force_opens_a_name_held_with_a_lock_delay() {
    let server = RedisServer::start();
    let delayed = || Config::new(server.url()).lock_delay(Duration::from_secs(60));
    let holder = LockManager::start(delayed()).await.unwrap();
    let waiter_mgr = LockManager::start(delayed()).await.unwrap();
    let held = holder.lock("held").acquire().await.unwrap();
    let mut raw = server.conn();
    let delay_key = "lockman_delay:{held}";
    assert!(
        raw.pttl::<_, i64>(delay_key).unwrap() > 60_000,
        "lease + delay"
    );

    let out = run(&server, &["inspect", "held"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(code(&out), 0, "{text}");
    assert!(
        text.contains("state:   held, ttl") && text.contains("delay:   "),
        "{text}"
    );
    let out = run(&server, &["inspect", "held", "--json"]);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["held"], true, "{json}");
    assert!(
        json["delay_ms"].as_u64().expect("delay_ms") > 60_000,
        "{json}"
    );

    let lock = waiter_mgr.lock("held");
    let waiter_id = lock.holder_id();
    let waiter = {
        tokio::spawn(async move {
            let g = lock.try_acquire_for(Duration::from_secs(20)).await.unwrap();
            (g, Instant::now())
        })
    };
    support::wait::subscribers(&mut raw, "redisson_lock__channel:{held}", 1).await;
    let before = Instant::now();
    let out = run(&server, &["unlock", "--force", "--yes", "held"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        code(&out),
        0,
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("unlocked \"held\" and deleted its lock-delay ("),
        "{text}"
    );
    let (g, at) = waiter.await.unwrap();
    let g = g.expect("the waiter took the opened name");
    assert!(at.duration_since(before) < Duration::from_secs(10));
    // The new holder's own hash and delay key, nothing of the old one's.
    let fields: Vec<String> = raw.hkeys("held").unwrap();
    assert_eq!(fields, vec![waiter_id.clone()]);
    let delay_holder: String = raw.get(delay_key).unwrap();
    assert_eq!(delay_holder, waiter_id);
    g.release().await.unwrap();
    assert!(!raw.exists::<_, bool>("held").unwrap());
    assert!(!raw.exists::<_, bool>(delay_key).unwrap());
    drop(held);
    holder.shutdown().await;
    waiter_mgr.shutdown().await;
}
