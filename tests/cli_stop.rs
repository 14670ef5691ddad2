//! `lockman elect` and `lockman exec` stop their command before its hold can expire, whatever
//! the command does with SIGTERM: the binary run as a subprocess, its Redis connection cut by a
//! proxy (a partition of that lockman alone) or its key deleted, a second lockman on a direct
//! connection waiting to take over. Also: `--stop-grace` checks, and `ls`/`top`/`inspect`
//! printing no control character from Redis. Linux only (process groups, /proc).
//! Run with `cargo test --features cli --test cli_stop`.
#![cfg(all(feature = "cli", target_os = "linux"))]

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Commands;
use support::RedisServer;
use support::proxy::Proxy;

const LOCKMAN: &str = env!("CARGO_BIN_EXE_lockman");

/// Short, to keep the tests quick: renewed every second, a default grace of 0.3 s.
const WATCHDOG: &str = "3s";

/// A command that traps SIGTERM and works on, as a job finishing its batch would: it appends
/// "$TAG work" to "$F" every 100 ms until killed, and "$TAG got TERM" when signalled.
/// (`wait` on a background sleep: a shell runs a trap only once its foreground command ends,
/// and `wait` ends at the signal, so the TERM line is written at once, not after a sleep.)
const STUBBORN: &str = r#"trap 'echo "$TAG got TERM" >> "$F"' TERM
while :; do echo "$TAG work" >> "$F"; sleep 0.1 & wait $!; done"#;

fn lockman(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(LOCKMAN);
    cmd.arg("--url")
        .arg(url)
        .args(["--watchdog-timeout", WATCHDOG])
        .args(args);
    cmd.env_remove("LOCKMAN_URL")
        .env_remove("REDIS_URL")
        .env_remove("LOCKMAN_CLIENT_NAME");
    cmd
}

/// A running `lockman` whose stderr is collected as it comes; SIGKILLed (with its command,
/// which dies with it) when dropped, however the test ends.
struct Running {
    child: Option<Child>,
    stderr: Arc<Mutex<String>>,
}

impl Running {
    /// `lockman ARGS -- sh -c STUBBORN`, tagged `tag`, writing to `file`.
    fn stubborn(url: &str, args: &[&str], tag: &str, file: &Path) -> Self {
        let mut cmd = lockman(url, args);
        cmd.args(["--", "sh", "-c", STUBBORN])
            .env("TAG", tag)
            .env("F", file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn lockman");
        let stderr = Arc::new(Mutex::new(String::new()));
        let pipe = child.stderr.take().expect("piped");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut all = sink.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        });
        Self {
            child: Some(child),
            stderr,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits up to `limit` for lockman to exit: its exit code.
    fn exit_within(&mut self, limit: Duration) -> Option<i32> {
        let mut code = None;
        let child = self.child.as_mut()?;
        support::wait::eventually_blocking(limit, || {
            code = child.try_wait().ok().flatten().and_then(|s| s.code());
            code.is_some()
        });
        code
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The lines of the shared file.
fn lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn has_line(file: &Path, start: &str) -> bool {
    lines(file).iter().any(|l| l.starts_with(start))
}

/// Asserts that no line of A's command comes after the first line of B's: the file is
/// appended to (O_APPEND) by both, so its order is the order of the writes.
fn assert_no_overlap(file: &Path) {
    let all = lines(file);
    let first_b = all
        .iter()
        .position(|l| l.starts_with("B "))
        .expect("B's command ran");
    let late: Vec<&String> = all[first_b..]
        .iter()
        .filter(|l| l.starts_with("A "))
        .collect();
    assert!(
        late.is_empty(),
        "A's command ran on beside B's: {} lines of A after B's first\n{}",
        late.len(),
        all.join("\n")
    );
}

fn shared_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lines");
    (dir, file)
}

/// The command under A is cut off from Redis (a proxy between them closed) and traps SIGTERM:
/// A kills its process group at `valid_until`, before the key expires and B (on a direct
/// connection) starts its own command. `args` are `elect ...` or `exec ...` with the name.
fn partitioned_holder_is_killed_before_the_next_starts(args: &[&str], once_code: i32) {
    let server = RedisServer::start();
    let mut proxy = Proxy::start(([127, 0, 0, 1], server.port()).into());
    let (_dir, file) = shared_file();
    let mut a = Running::stubborn(&proxy.url(), args, "A", &file);
    assert!(
        support::wait::eventually_blocking(Duration::from_secs(10), || has_line(&file, "A work")),
        "A's command never started: {}",
        a.stderr()
    );
    let b = Running::stubborn(&server.url(), args, "B", &file);
    proxy.cut();
    assert!(
        support::wait::eventually_blocking(Duration::from_secs(20), || has_line(&file, "B work")),
        "B's command never started: {}",
        b.stderr()
    );
    // Once A has exited its command's group is dead: every line it wrote is in the file.
    let code = a.exit_within(Duration::from_secs(20));
    assert_no_overlap(&file);
    let stderr = a.stderr();
    assert_eq!(code, Some(once_code), "{stderr}");
    assert!(
        stderr.contains("about to expire unrenewed; stopping the command (SIGTERM"),
        "{stderr}"
    );
    assert!(stderr.contains("killed it (SIGKILL)"), "{stderr}");
    assert!(has_line(&file, "A got TERM"), "SIGTERM came first");
}

#[test]
fn a_partitioned_leader_kills_its_stubborn_command_before_the_next_leader_starts() {
    partitioned_holder_is_killed_before_the_next_starts(&["elect", "--once", "job"], 73);
}

#[test]
fn a_partitioned_exec_kills_its_stubborn_command_before_the_next_exec_starts() {
    partitioned_holder_is_killed_before_the_next_starts(&["exec", "job"], 73);
}

/// The leader's key is deleted (a failover that lost it, a force unlock): the lead is known
/// lost and another may be in already, so A's command is SIGKILLed at once, with no grace.
/// B is started once A has seen the loss, and must find A's command dead.
#[test]
fn a_lost_lead_kills_a_stubborn_command_at_once() {
    let server = RedisServer::start();
    let (_dir, file) = shared_file();
    let args = ["elect", "--once", "job"];
    let mut a = Running::stubborn(&server.url(), &args, "A", &file);
    assert!(support::wait::eventually_blocking(
        Duration::from_secs(10),
        || has_line(&file, "A work")
    ));
    let _: () = server.conn().del("job").unwrap();
    assert!(
        support::wait::eventually_blocking(Duration::from_secs(10), || a
            .stderr()
            .contains("is lost")),
        "A never saw the loss: {}",
        a.stderr()
    );
    let b = Running::stubborn(&server.url(), &args, "B", &file);
    assert!(
        support::wait::eventually_blocking(Duration::from_secs(20), || has_line(&file, "B work")),
        "B's command never started: {}",
        b.stderr()
    );
    let code = a.exit_within(Duration::from_secs(20));
    assert_no_overlap(&file);
    let stderr = a.stderr();
    assert_eq!(code, Some(73), "{stderr}");
    assert!(
        stderr.contains("is lost; stopping the command (SIGKILL)"),
        "{stderr}"
    );
}

/// A `--lease` runs out while the command runs (no renewal, by design): SIGTERM the default
/// grace (a tenth of the lease) before, SIGKILL at `valid_until`, exit 73, all before B
/// (waiting on the same name) gets in.
#[test]
fn a_lease_running_out_kills_a_stubborn_command_before_the_next_exec_starts() {
    let server = RedisServer::start();
    let (_dir, file) = shared_file();
    // A grace of its own, not a tenth of the lease: on a loaded machine the shell may not run
    // its trap within 200 ms of the TERM, and the test is of the order TERM, KILL, next holder.
    let args = ["exec", "--lease", "2s", "--stop-grace", "1s", "job"];
    let mut a = Running::stubborn(&server.url(), &args, "A", &file);
    assert!(support::wait::eventually_blocking(
        Duration::from_secs(10),
        || has_line(&file, "A work")
    ));
    let b = Running::stubborn(&server.url(), &["exec", "job"], "B", &file);
    let code = a.exit_within(Duration::from_secs(20));
    assert!(
        support::wait::eventually_blocking(Duration::from_secs(20), || has_line(&file, "B work")),
        "B's command never started: {}",
        b.stderr()
    );
    assert_no_overlap(&file);
    let stderr = a.stderr();
    assert_eq!(code, Some(73), "{stderr}");
    assert!(stderr.contains("killed it (SIGKILL)"), "{stderr}");
    assert!(has_line(&file, "A got TERM"), "SIGTERM came first");
}

/// Whether `pid` runs: neither gone nor a zombie.
fn running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, None | Some('Z' | 'X'))
}

/// The command's own children are stopped with it: signals go to its process group. Here a
/// shell waits on a background `sleep`; the lock's key is deleted; the sleep must die too.
#[test]
fn a_stopped_commands_children_die_with_it() {
    let server = RedisServer::start();
    let (_dir, file) = shared_file();
    let script = format!("sleep 60 & echo $! > {}; wait", file.display());
    let mut a = lockman(&server.url(), &["exec", "kids", "--", "sh", "-c", &script])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut pid = None;
    assert!(support::wait::eventually_blocking(
        Duration::from_secs(10),
        || {
            pid = std::fs::read_to_string(&file)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            pid.is_some()
        }
    ));
    let pid = pid.unwrap_or_default();
    let _: () = server.conn().del("kids").unwrap();
    let gone = support::wait::eventually_blocking(Duration::from_secs(10), || !running(pid));
    let _ = a.kill();
    let _ = a.wait();
    if !gone {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    assert!(gone, "the command's child {pid} outlived the lock");
}

fn run(server: &RedisServer, args: &[&str]) -> Output {
    lockman(&server.url(), args).output().expect("run lockman")
}

/// A `--stop-grace` not shorter than the TTL (the lease), or than half a renewed hold's
/// watchdog timeout, is refused before anything is taken: exit 2 and one clear line.
#[test]
fn a_stop_grace_not_shorter_than_the_ttl_is_refused() {
    let server = RedisServer::start();
    for args in [
        &[
            "exec",
            "--lease",
            "1s",
            "--stop-grace",
            "1s",
            "g",
            "--",
            "true",
        ][..],
        &["exec", "--stop-grace", "1500ms", "g", "--", "true"][..],
        &["elect", "--stop-grace", "3s", "g", "--", "true"][..],
    ] {
        let out = run(&server, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("lockman: --stop-grace") && stderr.contains("is not shorter than"),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    let keys: Vec<String> = server.conn().keys("*").unwrap();
    assert!(keys.is_empty(), "nothing taken: {keys:?}");
    for args in [
        &[
            // Shorter than the lease is accepted: 1 s is left for `true` to run (with 100 ms
            // left, a loaded machine's fork and exec took longer, and it was stopped: 73).
            "exec",
            "--lease",
            "10s",
            "--stop-grace",
            "9s",
            "g",
            "--",
            "true",
        ][..],
        &["elect", "--stop-grace", "1s", "g", "--", "true"][..],
    ] {
        let out = run(&server, args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `lockman --client-name SERVICE VERB NAME -- sleep 30`, running until dropped.
fn evil_child(server: &RedisServer, service: &str, verb: &str, name: &str) -> Running {
    Running {
        child: Some(
            lockman(
                &server.url(),
                &["--client-name", service, verb, name, "--", "sleep", "30"],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
        ),
        stderr: Arc::default(),
    }
}

/// A lock name and a client record with an OSC title sequence, a bell, a clear-screen and a
/// colour code: `ls`, `top --once`, `inspect` and `leader` print them escaped, no ESC or BEL
/// byte.
#[test]
fn ls_top_and_inspect_print_no_control_characters() {
    let server = RedisServer::start();
    let evil_service = "evil\x1b]0;pwned\x07\x1b[2J";
    let evil_name = "name\x1b[31mRED\u{9b}1m";
    let _holder = evil_child(&server, evil_service, "exec", evil_name);
    // Holds are listed once renewed (0.5 s old); records refresh every second (the first is
    // written at the first hold, before the hold is listed).
    let mut ls = String::new();
    assert!(
        support::wait::eventually_blocking(Duration::from_secs(15), || {
            ls = String::from_utf8_lossy(&run(&server, &["ls"]).stdout).into_owned();
            ls.contains("name\\x1b[31mRED")
        }),
        "the hold never showed: {ls:?}"
    );
    let top = run(&server, &["top", "--once"]);
    let inspect = run(&server, &["inspect", evil_name]);
    assert_eq!(inspect.status.code(), Some(0));
    for (what, out) in [
        ("ls", ls.into_bytes()),
        ("top", top.stdout),
        ("inspect", inspect.stdout),
    ] {
        let text = String::from_utf8_lossy(&out).into_owned();
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{what} printed a control character: {text:?}"
        );
        assert!(text.contains("name\\x1b[31mRED\\u{9b}1m"), "{what}: {text}");
    }
    let ls = String::from_utf8_lossy(&run(&server, &["ls"]).stdout).into_owned();
    assert!(ls.contains("evil\\x1b]0;pwned\\x07\\x1b[2J@"), "{ls}");
    // JSON escapes them its own way (C1 and DEL too), and reads back the same.
    let json = String::from_utf8_lossy(&run(&server, &["ls", "--json"]).stdout).into_owned();
    assert!(
        !json.trim_end().chars().any(char::is_control),
        "ls --json printed a control character: {json:?}"
    );
    let clients: serde_json::Value = serde_json::from_str(&json).unwrap();
    let client = clients
        .as_array()
        .and_then(|all| all.iter().find(|c| c["service"] == evil_service))
        .unwrap_or_else(|| panic!("{json}"));
    assert_eq!(client["holds"][0]["name"], evil_name, "{json}");
    // `leader` prints the election's name and the leader's service escaped too.
    let evil_election = "lead\x1b[31mER\u{9b}1m";
    let _leader = evil_child(&server, evil_service, "elect", evil_election);
    let mut leader = String::new();
    assert!(
        support::wait::eventually_blocking(Duration::from_secs(15), || {
            let out = run(&server, &["leader", evil_election]);
            leader = String::from_utf8_lossy(&out.stdout).into_owned();
            out.status.code() == Some(0) && leader.contains("evil\\x1b]0;pwned")
        }),
        "the leader never showed with its service: {leader:?}"
    );
    assert!(
        !leader.chars().any(|c| c.is_control() && c != '\n'),
        "leader printed a control character: {leader:?}"
    );
    assert!(leader.contains("lead\\x1b[31mER\\u{9b}1m"), "{leader}");
}

/// The command's process group of its own gets the terminal while it runs: a command that
/// reads the terminal (a prompt) is not stopped by SIGTTIN, and Ctrl-C reaches it; the
/// terminal is given back after. Driven in a terminal under tmux.
#[test]
fn a_command_in_its_own_group_still_has_the_terminal() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("SKIPPED: tmux is not installed (apt-get install tmux)");
        return;
    }
    let server = RedisServer::start();
    let socket = format!("lockman-stop-{}", std::process::id());
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .args(["-L", &socket])
            .args(args)
            .output()
            .expect("run tmux")
    };
    /// Ends the tmux server (and what runs in it) however the test ends.
    struct Session(String);
    impl Drop for Session {
        fn drop(&mut self) {
            let _ = Command::new("tmux")
                .args(["-L", &self.0, "kill-server"])
                .output();
        }
    }
    let _session = Session(socket.clone());
    let exec = format!("{LOCKMAN} --url {} exec tty --", server.url());
    let script = format!(
        "{exec} sh -c 'read x; echo got-$x'; echo FIRST-EXITED-$?; \
         {exec} sleep 30; echo SECOND-EXITED-$?; \
         read y; echo SHELL-READ-$y; sleep 30"
    );
    let out = tmux(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "100",
        "-y",
        "20",
        "sh",
        "-c",
        &script,
    ]);
    assert!(out.status.success(), "{out:?}");
    let screen =
        || String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", "t"]).stdout).into_owned();
    // Whether the screen comes to show `what` within 10 s, and the screen last seen.
    let shows = |what: &str| {
        let mut seen = String::new();
        let shown = support::wait::eventually_blocking(Duration::from_secs(10), || {
            seen = screen();
            seen.contains(what)
        });
        (shown, seen)
    };
    // The first command waits on the terminal; the lock is held meanwhile.
    let mut raw = server.conn();
    assert!(support::wait::eventually_blocking(
        Duration::from_secs(10),
        || raw.exists::<_, bool>("tty").unwrap()
    ));
    tmux(&["send-keys", "-t", "t", "yes", "Enter"]);
    let (shown, seen) = shows("FIRST-EXITED-0");
    assert!(shown, "the command could not read the terminal: {seen}");
    assert!(seen.contains("got-yes"), "{seen}");
    // The second runs until Ctrl-C, which the terminal sends to its group.
    assert!(support::wait::eventually_blocking(
        Duration::from_secs(10),
        || raw.exists::<_, bool>("tty").unwrap()
    ));
    tmux(&["send-keys", "-t", "t", "C-c"]);
    let (shown, seen) = shows("SECOND-EXITED-130");
    assert!(shown, "Ctrl-C did not end the command: {seen}");
    // The terminal is the shell's again: it reads it.
    tmux(&["send-keys", "-t", "t", "back", "Enter"]);
    let (shown, seen) = shows("SHELL-READ-back");
    assert!(shown, "the terminal was not given back: {seen}");
}
