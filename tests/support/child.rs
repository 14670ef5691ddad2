//! A test that runs one of its own binary's ignored tests as a child process (a second client
//! that can be killed, frozen or given another clock).

use std::process::{Command, Stdio};

/// Runs this test binary's ignored test `test` as a child process, with `env` set, and waits
/// until it prints a line starting with `prefix`: returns the child (kill it) and the rest of
/// that line.
pub fn spawn_child_test(
    test: &str,
    env: (&str, &str),
    prefix: &str,
) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe)
        .args(["--ignored", "--exact", test, "--nocapture"])
        .env(env.0, env.1)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child test");
    let stdout = child.stdout.take().expect("piped stdout");
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("child output");
        if let Some(rest) = line.strip_prefix(prefix) {
            return (child, rest.trim().to_owned());
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("child test {test} ended without printing {prefix:?}");
}

/// Runs this test binary's ignored test `test` as a child process, with `env` set, to its end:
/// its output (its exit status says whether it passed).
pub fn run_child_test(test: &str, env: (&str, &str)) -> std::process::Output {
    let exe = std::env::current_exe().expect("test binary");
    Command::new(exe)
        .args(["--ignored", "--exact", test, "--nocapture"])
        .env(env.0, env.1)
        .output()
        .expect("run child test")
}
