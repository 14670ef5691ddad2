//! A fair lock's keys as Redis has them: the queue, the deadlines, and the clock they are in;
//! and child processes whose wall clock is off.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Commands;

/// The queue of `name` (`redisson_lock_queue:{name}`), head first.
pub fn queue(raw: &mut redis::Connection, name: &str) -> Vec<String> {
    raw.lrange(format!("redisson_lock_queue:{{{name}}}"), 0, -1)
        .unwrap()
}

/// The places' deadlines of `name` (`redisson_lock_timeout:{name}`), epoch ms, earliest first.
pub fn deadlines(raw: &mut redis::Connection, name: &str) -> Vec<(String, i64)> {
    raw.zrange_withscores(format!("redisson_lock_timeout:{{{name}}}"), 0, -1)
        .unwrap()
}

/// Now on this machine's clock, epoch ms. lockman's places are in the Redis server's clock
/// (`server_ms`); the tests' servers run on this machine, so the two agree.
pub fn epoch_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Now on the Redis server's clock (`TIME`), epoch ms: the clock of lockman's places.
pub fn server_ms(raw: &mut redis::Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(raw).unwrap();
    s * 1000 + us / 1000
}

/// Debian's libfaketime, multi-threaded (package `libfaketime`, which the `faketime` package
/// brings; .ci/run installs it).
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// `program` to run with its wall clock `skew` off (e.g. `-15s`, `+30s`), its monotonic clock
/// left true: libfaketime preloaded directly. Not the `faketime` wrapper: it makes a named
/// semaphore per its pid and leaves it behind when killed, so once pids wrap a later wrapper
/// fails at start ("sem_open: File exists") and the child never runs (seen in CI).
pub fn skewed(program: impl AsRef<std::ffi::OsStr>, skew: &str) -> Command {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} missing (Debian package `libfaketime`; .ci/run installs `faketime`)"
    );
    let mut command = Command::new(program);
    command
        .env("LD_PRELOAD", LIBFAKETIME)
        .env("FAKETIME", skew)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("DONT_FAKE_MONOTONIC", "1");
    command
}

/// A child process (this test binary's ignored test) whose wall clock is `skew` off
/// (libfaketime, [`skewed`]), its monotonic clock
/// left true. Its stdout is read line by line on a thread; its stdin takes lines.
pub struct SkewedChild {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl SkewedChild {
    /// Runs the ignored test `test` under `faketime -f <skew>` (e.g. `-15s`), with `env` set.
    pub fn spawn(test: &str, env: (&str, &str), skew: &str) -> Self {
        let exe = std::env::current_exe().expect("test binary");
        let mut child = skewed(exe, skew)
            .args(["--ignored", "--exact", test, "--nocapture"])
            .env(env.0, env.1)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn a child test under libfaketime");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
        }
    }

    /// The rest of the next line that starts with `prefix`, waiting at most `limit`; panics
    /// when none comes.
    pub fn expect_line(&mut self, prefix: &str, limit: Duration) -> String {
        let until = std::time::Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.trim().to_owned();
                    }
                }
                Err(e) => panic!("no line {prefix:?} from the child within {limit:?}: {e}"),
            }
        }
    }

    /// Sends the child one line.
    pub fn say(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("child's stdin");
        self.stdin.flush().expect("child's stdin");
    }

    /// Waits for the child to end; true when it succeeded.
    pub fn wait(mut self) -> bool {
        self.child.wait().expect("child").success()
    }
}

impl Drop for SkewedChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
