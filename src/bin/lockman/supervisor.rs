//! The command under `exec` and `elect`, one supervisor for both: started in a process group of
//! its own, SIGINT and SIGTERM passed on to that group, and stopped before its hold can expire.
//!
//! The deadline is the hold's `valid_until` (monotonic clock): the latest instant the hold is
//! still guaranteed, which comes before its key can expire and another holder get in. Once
//! renewals stop confirming the hold, the command gets SIGTERM `--stop-grace` before that
//! instant, and its whole process group SIGKILL at it if the command has not exited. A hold
//! known lost (its key deleted or taken, or unrenewable for a whole TTL) is past any guarantee:
//! another holder may be in already, so the group gets SIGKILL at once, with no grace.

use std::convert::Infallible;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use lockman::LockError;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::{Failure, code};

/// A hold the command runs under: a lock's or a permit's guard, or a lead.
pub(crate) trait Hold {
    /// Resolves when the hold is known lost, or when its `valid_until` comes within `grace`
    /// with no renewal confirmed since (the hold's `scope_with_margin`); never while it lasts.
    async fn ending(&self, grace: Duration) -> Ending;
    /// Resolves once the hold is known lost.
    async fn lost(&self);
    /// The latest instant the hold is still guaranteed; `None` for one that never expires.
    fn valid_until(&self) -> Option<Instant>;
}

/// Why a hold stopped being guaranteed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Ending {
    /// Within the grace of its `valid_until`, unrenewed: still held until then.
    Expiring,
    /// Known lost: another holder may be in already.
    Lost,
}

impl Ending {
    /// What `scope` answered: which of the two stopped it.
    pub(crate) fn of(scoped: Result<Infallible, LockError>) -> Self {
        match scoped {
            Ok(never) => match never {},
            Err(LockError::HoldExpiring { .. }) => Ending::Expiring,
            Err(_) => Ending::Lost,
        }
    }
}

/// What to do when the hold ends while the command runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum OnEnd {
    /// Stop the command: SIGTERM at the grace, SIGKILL to its group at `valid_until`, or at
    /// once when the hold is known lost.
    Stop { grace: Duration },
    /// Only warn: the command runs on, unguarded (`exec --on-lost warn`).
    Warn { grace: Duration },
}

impl OnEnd {
    fn grace(self) -> Duration {
        match self {
            OnEnd::Stop { grace } | OnEnd::Warn { grace } => grace,
        }
    }
}

/// How the command ended.
pub(crate) struct Ran {
    /// Its exit code, or 128 + the signal that ended it.
    pub code: u8,
    /// Whether the hold ended (expiring or lost) while it ran.
    pub hold_ended: bool,
}

/// The grace `--stop-grace` gives, checked against the hold's TTL: the lease, or the watchdog
/// timeout of a renewed hold. Default: a tenth of the TTL, `scope`'s own margin.
///
/// A grace not shorter than the TTL would stop the command as soon as it starts. A renewed
/// hold is renewed every third of its TTL, and its `valid_until` is then about a TTL ahead,
/// so a grace of half the TTL or more would stop a healthy command between two renewals:
/// refused too.
pub(crate) fn stop_grace(
    given: Option<Duration>,
    ttl: Duration,
    renewed: bool,
) -> Result<Duration, Failure> {
    let Some(grace) = given else {
        return Ok(ttl / 10);
    };
    if grace >= ttl {
        return Err(Failure::new(
            code::USAGE,
            format!(
                "--stop-grace {grace:?} is not shorter than the hold's TTL ({ttl:?}): the command would be stopped before it starts"
            ),
        ));
    }
    if renewed && grace >= ttl / 2 {
        return Err(Failure::new(
            code::USAGE,
            format!(
                "--stop-grace {grace:?} is not shorter than half the watchdog timeout ({ttl:?}): renewed every third of it, a healthy hold would stop the command"
            ),
        ));
    }
    Ok(grace)
}

/// SIGINT and SIGTERM to lockman: passed on to the command's group while it runs.
pub(crate) struct Signals {
    pub interrupt: Signal,
    pub terminate: Signal,
}

impl Signals {
    pub(crate) fn new() -> Result<Self, Failure> {
        let sig = |kind| signal(kind).map_err(|e| Failure::new(code::REDIS, e.to_string()));
        Ok(Self {
            interrupt: sig(SignalKind::interrupt())?,
            terminate: sig(SignalKind::terminate())?,
        })
    }
}

/// Runs `command` under `hold` until it exits; `what` names the hold in messages ("the lead
/// of \"jobs\"", "lock \"orders\"").
pub(crate) async fn supervise<H: Hold>(
    hold: &H,
    what: &str,
    command: &mut tokio::process::Command,
    program: &str,
    on_end: OnEnd,
    signals: &mut Signals,
) -> Result<Ran, Failure> {
    // Its own process group, so that a shell's children get the signals too; in the
    // terminal's foreground if lockman is, given back when the command ends (the guard).
    command.process_group(0);
    let _terminal = Terminal::hand_over(command);
    let (mut child, pid) = start_child(command, program)?;
    let mut stop = Stopper {
        what,
        on_end,
        group: pid,
        ended: None,
        known_lost: false,
        kill_at: None,
        killed: false,
    };
    let ending = hold.ending(on_end.grace());
    tokio::pin!(ending);
    let lost = hold.lost();
    tokio::pin!(lost);
    let status = loop {
        let kill_at = stop.kill_at;
        let deadline = async move {
            match kill_at {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            status = child.wait() => break status,
            _ = signals.interrupt.recv() => stop.send(libc::SIGINT),
            _ = signals.terminate.recv() => stop.send(libc::SIGTERM),
            end = &mut ending, if stop.ended.is_none() => stop.hold_ending(end, hold.valid_until()),
            () = &mut lost, if stop.ended.is_some() && !stop.known_lost => stop.hold_lost(),
            () = deadline, if stop.kill_at.is_some() && !stop.killed => stop.kill_due(),
        }
    };
    let status = status.map_err(|e| Failure::new(code::CANNOT_RUN, e.to_string()))?;
    let stopping = stop.ended.is_some() && matches!(on_end, OnEnd::Stop { .. });
    if stopping && !stop.killed {
        // The command exited on SIGTERM; what it started and left behind in its group (a
        // shell's children) must not run on past the hold either.
        stop.send(libc::SIGKILL);
    }
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        (None, None) => 1,
    };
    Ok(Ran {
        code,
        hold_ended: stop.ended.is_some(),
    })
}

/// What [`supervise`] does when the hold ends under the command: what it has seen of the hold
/// and what it has sent the command's group.
struct Stopper<'a> {
    /// The hold, in messages.
    what: &'a str,
    on_end: OnEnd,
    /// The command's process group: its id is the child's pid, which stays ours while the child
    /// is unreaped (until `wait` ends the loop); the kernel does not hand out a pid again while
    /// a group has it as its id, so after the reap it still names our group while any member
    /// lives.
    group: Option<i32>,
    /// The hold's end as first seen.
    ended: Option<Ending>,
    /// Whether the hold is known lost.
    known_lost: bool,
    /// When SIGKILL is due.
    kill_at: Option<Instant>,
    /// Whether SIGKILL was sent.
    killed: bool,
}

impl Stopper<'_> {
    /// Sends `sig` to the command's group.
    fn send(&self, sig: i32) {
        if let Some(pid) = self.group {
            kill(-pid, sig);
        }
    }

    /// The hold is about to expire unrenewed (valid until `until`), or is lost: the command is
    /// stopped (SIGTERM then SIGKILL at `until`; SIGKILL at once when lost), or only warned of.
    fn hold_ending(&mut self, end: Ending, until: Option<Instant>) {
        let what = self.what;
        self.ended = Some(end);
        self.known_lost = end == Ending::Lost;
        match (end, self.on_end) {
            (Ending::Expiring, OnEnd::Stop { .. }) => {
                let left = until.map(|u| u.saturating_duration_since(Instant::now()));
                eprintln!(
                    "lockman: {what} is about to expire unrenewed; stopping the command (SIGTERM, SIGKILL in {})",
                    left.map_or("never".into(), |l| format!("{:.1}s", l.as_secs_f64()))
                );
                self.send(libc::SIGTERM);
                self.kill_at = until;
            }
            (Ending::Lost, OnEnd::Stop { .. }) => {
                eprintln!("lockman: {what} is lost; stopping the command (SIGKILL)");
                self.send(libc::SIGKILL);
                self.killed = true;
            }
            (Ending::Expiring, OnEnd::Warn { .. }) => {
                eprintln!("lockman: {what} is about to expire unrenewed; the command goes on");
            }
            (Ending::Lost, OnEnd::Warn { .. }) => {
                eprintln!("lockman: {what} lost; the command goes on");
            }
        }
    }

    /// The hold, about to expire, is now known lost: the command is killed at once (or only
    /// warned of).
    fn hold_lost(&mut self) {
        let what = self.what;
        self.known_lost = true;
        match self.on_end {
            OnEnd::Stop { .. } if !self.killed => {
                eprintln!("lockman: {what} is lost; killing the command (SIGKILL)");
                self.send(libc::SIGKILL);
                self.killed = true;
            }
            OnEnd::Stop { .. } => {}
            OnEnd::Warn { .. } => eprintln!("lockman: {what} lost; the command goes on"),
        }
    }

    /// The hold could expire now and the command has not stopped: SIGKILL.
    fn kill_due(&mut self) {
        let what = self.what;
        eprintln!(
            "lockman: the command did not stop before {what} could expire; killed it (SIGKILL)"
        );
        self.send(libc::SIGKILL);
        self.killed = true;
    }
}

/// The terminal lockman runs in the foreground of, handed over to the command's process group
/// for as long as it runs. A process group of its own is not the terminal's foreground: the
/// command would be stopped (SIGTTIN) the moment it read the terminal, a prompt for instance,
/// and the terminal's Ctrl-C would not reach it. Given back to lockman's group when dropped.
///
/// Not job control: Ctrl-Z stops the command's group only, while lockman waits on.
struct Terminal {
    fd: Option<libc::c_int>,
}

impl Terminal {
    /// Hands the terminal over in the command's child, between fork and exec, when one of
    /// stdin, stdout and stderr is a terminal whose foreground is lockman's group.
    fn hand_over(command: &mut tokio::process::Command) -> Self {
        // SAFETY: isatty(3), tcgetpgrp(3) and getpgrp(2) take and return integers.
        let fd = (0..=2)
            .find(|&fd| unsafe { libc::isatty(fd) == 1 && libc::tcgetpgrp(fd) == libc::getpgrp() });
        if let Some(fd) = fd {
            let before_exec = move || {
                // Now in its own group (std sets it up before these calls), a background
                // one: tcsetpgrp would stop it with SIGTTOU unless blocked. A failure leaves
                // the command in the background, as without a terminal; it still runs.
                with_sigttou_blocked(|| {
                    // SAFETY: tcsetpgrp(3) and getpid(2) take and return integers.
                    unsafe { libc::tcsetpgrp(fd, libc::getpid()) };
                });
                Ok(())
            };
            // SAFETY: the closure runs in the child between fork and exec, where only
            // async-signal-safe work is allowed: it makes system calls on integers and a
            // signal set on its stack, and allocates nothing.
            unsafe {
                command.pre_exec(before_exec);
            }
        }
        Self { fd }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let Some(fd) = self.fd else { return };
        with_sigttou_blocked(|| {
            // SAFETY: tcgetpgrp(3), tcsetpgrp(3) and getpgrp(2) take and return integers.
            unsafe {
                let ours = libc::getpgrp();
                if libc::tcgetpgrp(fd) != ours {
                    libc::tcsetpgrp(fd, ours);
                }
            }
        });
    }
}

/// Runs `f` with SIGTTOU blocked on this thread (the kernel lets a background process group
/// set the terminal's foreground then, instead of stopping it), and the mask restored after.
fn with_sigttou_blocked(f: impl FnOnce()) {
    // SAFETY: sigemptyset(3) and sigaddset(3) fill a set on this stack; pthread_sigmask(3)
    // reads and writes sets on this stack (it is the rt_sigprocmask system call, safe
    // between fork and exec too).
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
        f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

/// Makes the command die with this process (Linux and Android): killed by SIGKILL the moment
/// lockman ends, whatever ends it, SIGKILL and the OOM killer included. Without it the command
/// would run on after a killed lockman while the lock expires a watchdog timeout later, and the
/// next `exec` would start a second command beside it: exactly what the lock is there to
/// prevent. SIGKILL rather than SIGTERM because a command may trap or ignore SIGTERM and so
/// outlive the lock; nobody is left to send a second signal.
///
/// The signal follows the *thread* that forked the child (prctl(2)): `run` is driven by
/// `block_on` on the main thread (src/bin/lockman/main.rs), which lives as long as the
/// process, and `Command::spawn` forks on the calling thread.
///
/// Only the command's own process is covered: children it forks itself are not (a shell that
/// runs its last command with `exec` passes the setting on, since it survives execve).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn die_with_lockman(command: &mut tokio::process::Command) {
    // Taken before the fork: the child compares it with its parent's pid after prctl, since
    // lockman may have died between fork and prctl, and then no signal will ever come.
    // A pid fits in pid_t, the kernel's own type; std hands it out as u32.
    let lockman = std::process::id() as libc::pid_t;
    let before_exec = move || {
        // SAFETY: prctl(2) and getppid(2) are system calls that take integers and touch no
        // memory of this process; PR_SET_PDEATHSIG with a valid signal cannot fail otherwise.
        // prctl is variadic: its arguments are passed as the unsigned longs the kernel reads.
        let (signal, unused): (libc::c_ulong, libc::c_ulong) = (libc::SIGKILL as _, 0);
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal, unused, unused, unused) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != lockman {
                // lockman is gone already (reparented to init or a subreaper): do not start
                // the command. std then ends the child with _exit(2).
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        Ok(())
    };
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe work is allowed (another thread may have held the allocator's lock at
    // the fork). It makes two system calls and builds an io::Error from an errno, which
    // stores the integer and allocates nothing; it captures only a copied pid.
    unsafe {
        command.pre_exec(before_exec);
    }
}

/// Elsewhere there is no such guarantee: a command whose lockman was killed with SIGKILL runs
/// on (README, "The lockman command").
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn die_with_lockman(_command: &mut tokio::process::Command) {}

/// Starts the command, which dies with lockman ([`die_with_lockman`]): the child and its pid.
pub(crate) fn start_child(
    command: &mut tokio::process::Command,
    program: &str,
) -> Result<(tokio::process::Child, Option<i32>), Failure> {
    die_with_lockman(command);
    let child = command.spawn().map_err(|e| {
        let code = match e.kind() {
            std::io::ErrorKind::NotFound => code::NOT_FOUND,
            _ => code::CANNOT_RUN,
        };
        Failure::new(code, format!("{program}: {e}"))
    })?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok());
    Ok((child, pid))
}

/// Sends `sig` to `pid`, or to the process group `-pid` (kill(2); an error, such as a child
/// that just exited, is ignored).
pub(crate) fn kill(pid: i32, sig: i32) {
    // SAFETY: kill(2) takes two integers and touches no memory of this process.
    unsafe {
        libc::kill(pid, sig);
    }
}
