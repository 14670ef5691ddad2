//! Where the kit's server processes and folders come from, so that none outlives the test
//! process that made it, however that process ends.
//!
//! A server is killed when its [`TestServer`](super::TestServer) is dropped; but a test process
//! killed by a signal (Ctrl-C on `cargo test`, SIGTERM, SIGKILL), ended by `process::exit` or an
//! abort, or keeping a server in a `static` (never dropped) drops nothing. So on Linux every
//! server is started through `setpriv --pdeathsig KILL` (util-linux): the kernel sends it SIGKILL
//! when its parent dies. The signal follows the *thread* that forked it (prctl(2)), so the fork
//! is done by one thread of the kit that lives as long as the process, never by the test's own
//! thread, which may end while its server is still in use. (`setpriv` rather than a `pre_exec`
//! prctl: the crate forbids `unsafe`.) The folders carry their process's pid in their name, and
//! each new one first removes those left by processes that are gone.

use std::io;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, OnceLock};

/// What the folders of the kit's servers are called: this, the owner's pid, a dash, random.
const DIR_PREFIX: &str = "lockman-kit-";

/// A command to run, and where its `spawn` result goes.
type Request = (Command, Sender<io::Result<Child>>);

/// The spawner thread's inbox; the thread lives as long as the process.
static SPAWNER: OnceLock<Mutex<Sender<Request>>> = OnceLock::new();

/// A command that runs `bin`, to be given its arguments and started by [`spawn`]: on Linux,
/// through `setpriv --pdeathsig KILL` when that is installed, so that the server dies with the
/// test process (`setpriv` replaces itself with `bin`: the child's pid is the server's).
pub(super) fn server_command(bin: &std::ffi::OsStr) -> Command {
    if dies_with_parent() {
        let mut command = Command::new("setpriv");
        command.args(["--pdeathsig", "KILL", "--"]).arg(bin);
        command
    } else {
        Command::new(bin)
    }
}

/// Whether servers die with the test process here: Linux with `setpriv --pdeathsig` working.
pub(super) fn dies_with_parent() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        cfg!(target_os = "linux")
            && Command::new("setpriv")
                .args(["--pdeathsig", "KILL", "--", "true"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
    })
}

/// Starts `command` from the kit's spawner thread (started at the first call), so that a
/// parent-death signal set in the child fires when the process ends, not when the calling
/// thread does.
pub(super) fn spawn(command: Command) -> io::Result<Child> {
    let inbox = match SPAWNER.get() {
        Some(inbox) => inbox,
        None => {
            let (tx, rx) = mpsc::channel::<Request>();
            std::thread::Builder::new()
                .name("lockman-kit-spawner".into())
                .spawn(move || {
                    for (mut command, reply) in rx {
                        let _ = reply.send(command.spawn());
                    }
                })?;
            // Another thread may have set it meanwhile: then its thread is the spawner, and
            // this one ends, having forked nothing, once `tx` is dropped here.
            let _ = SPAWNER.set(Mutex::new(tx));
            SPAWNER
                .get()
                .ok_or_else(|| io::Error::other("the kit's spawner was not kept"))?
        }
    };
    let (reply, answer) = mpsc::channel();
    inbox
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((command, reply))
        .map_err(|_| io::Error::other("the kit's spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| io::Error::other("the kit's spawner thread did not answer"))?
}

/// A new folder for a server, named after this process; first removes the kit's folders of
/// processes that no longer run (Linux: judged by `/proc`; elsewhere none is removed).
pub(super) fn temp_dir() -> io::Result<tempfile::TempDir> {
    remove_orphan_dirs(&std::env::temp_dir());
    tempfile::Builder::new()
        .prefix(&format!("{DIR_PREFIX}{}-", std::process::id()))
        .tempdir()
}

/// Removes `lockman-kit-<pid>-…` folders in `tmp` whose process is gone. Errors are ignored:
/// another process may be removing the same folder, or it may not be ours to remove.
fn remove_orphan_dirs(tmp: &Path) {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(DIR_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !proc.join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
