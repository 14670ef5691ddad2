//! `lockman exec`: run a command under a lock.

use std::convert::Infallible;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use lockman::{LockError, LockGuard, LockManager, PermitGuard};

use crate::supervisor::{Ending, Hold, OnEnd, Signals, stop_grace, supervise};
use crate::{Failure, Kind, Server, code, duration};

#[derive(Args, Debug)]
pub struct ExecArgs {
    /// Which kind of lock to take.
    #[arg(long, value_enum, default_value = "lock")]
    kind: Kind,
    /// How long to wait for the lock (default: as long as it takes).
    #[arg(long, value_name = "DUR", value_parser = duration)]
    wait: Option<Duration>,
    /// Take the lock with this lease instead of the watchdog: it expires after DUR even while
    /// the command runs, so the command is stopped before then (see --on-lost).
    #[arg(long, value_name = "DUR", value_parser = duration)]
    lease: Option<Duration>,
    /// Hold one permit of the permit semaphore NAME instead of a lock (renewed like a lock, or
    /// for --lease): at most --permits commands run at once under NAME, on every machine.
    #[arg(long, requires = "permits", conflicts_with = "kind")]
    semaphore: bool,
    /// With --semaphore: the semaphore's permits, set when the name has none yet (a semaphore
    /// already set keeps its own).
    #[arg(long, value_name = "N", requires = "semaphore")]
    permits: Option<u32>,
    /// What to do when the lock (or permit) is about to expire unrenewed or is lost while the
    /// command runs: stop the command and exit 73 (SIGTERM --stop-grace before the hold's
    /// guarantee ends, SIGKILL to its process group when it ends; SIGKILL at once when the
    /// hold is known lost), or only warn and let it run on, unguarded.
    #[arg(long, value_enum, default_value = "kill")]
    on_lost: OnLost,
    /// How long before the hold can expire unrenewed the command gets SIGTERM. Default: a
    /// tenth of its TTL (the lease, or the watchdog timeout); shorter than the lease, or than
    /// half the watchdog timeout.
    #[arg(long, value_name = "DUR", value_parser = duration)]
    stop_grace: Option<Duration>,
    /// The lock name.
    name: String,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<String>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq)]
enum OnLost {
    Kill,
    Warn,
}

pub async fn run(server: &Server, args: ExecArgs) -> Result<u8, Failure> {
    // The hold's TTL: the lease, or the watchdog timeout of a renewed hold.
    let grace = stop_grace(
        args.stop_grace,
        args.lease.unwrap_or(server.watchdog_timeout),
        args.lease.is_none(),
    )?;
    let manager = server.connect().await?;
    let acquired = {
        let acquire = acquire(&manager, &args);
        tokio::pin!(acquire);
        if std::io::stderr().is_terminal() {
            waiting_line(&manager, (&args.name, args.semaphore), acquire).await
        } else {
            acquire.await
        }
    };
    let held = match acquired {
        Ok(Some(held)) => held,
        Ok(None) => {
            let waited = args.wait.unwrap_or_default();
            manager.shutdown().await;
            return Err(Failure::new(
                code::NOT_ACQUIRED,
                format!(
                    "{} {:?} not acquired within {waited:?}",
                    what(&args),
                    args.name
                ),
            ));
        }
        Err(e) => {
            manager.shutdown().await;
            return Err(Failure::redis(e));
        }
    };
    let outcome = command(&args, &held, grace).await;
    if let Err(e) = held.release().await
        && !matches!(e, LockError::NotHeld { .. })
    {
        eprintln!("lockman: releasing {:?}: {e}", args.name);
    }
    manager.shutdown().await;
    outcome
}

/// What `exec` holds while its command runs.
enum Held {
    Lock(LockGuard),
    Permit(PermitGuard),
}

impl Hold for Held {
    async fn ending(&self, grace: Duration) -> Ending {
        let forever = std::future::pending::<Infallible>();
        Ending::of(match self {
            Held::Lock(g) => g.scope_with_margin(grace, forever).await,
            Held::Permit(g) => g.scope_with_margin(grace, forever).await,
        })
    }

    async fn lost(&self) {
        match self {
            Held::Lock(g) => g.lost().await,
            Held::Permit(g) => g.lost().await,
        }
    }

    fn valid_until(&self) -> Option<Instant> {
        match self {
            Held::Lock(g) => Some(g.valid_until()),
            Held::Permit(g) => g.valid_until(),
        }
    }
}

impl Held {
    fn token(&self) -> Option<u64> {
        match self {
            Held::Lock(g) => g.token(),
            Held::Permit(_) => None,
        }
    }

    async fn release(self) -> Result<(), LockError> {
        match self {
            Held::Lock(g) => g.release().await,
            Held::Permit(g) => g.release().await,
        }
    }
}

async fn acquire(manager: &LockManager, args: &ExecArgs) -> Result<Option<Held>, LockError> {
    if let (true, Some(permits)) = (args.semaphore, args.permits) {
        let sem = manager.permit_semaphore(args.name.as_str());
        sem.try_set_permits(permits).await?;
        let held = match (args.wait, args.lease) {
            (None, None) => Some(sem.acquire(1).await?),
            (None, Some(lease)) => Some(sem.acquire_with_lease(1, lease).await?),
            (Some(wait), None) => sem.try_acquire_for(1, wait).await?,
            (Some(wait), Some(lease)) => sem.try_acquire_with_lease(1, wait, lease).await?,
        };
        return Ok(held.map(Held::Permit));
    }
    let name = args.name.as_str();
    let lock = match args.kind {
        Kind::Lock => manager.lock(name),
        Kind::Fair => (*manager.fair_lock(name)).clone(),
        Kind::Read => (*manager.read_write_lock(name).read()).clone(),
        Kind::Write => (*manager.read_write_lock(name).write()).clone(),
        Kind::Fenced => (*manager.fenced_lock(name)).clone(),
        Kind::NonReentrant => manager.non_reentrant_lock(name),
        Kind::NonReentrantFair => (*manager.non_reentrant_fair_lock(name)).clone(),
    };
    let held = match (args.wait, args.lease) {
        (None, None) => Some(lock.acquire().await?),
        (None, Some(lease)) => Some(lock.acquire_with_lease(lease).await?),
        (Some(wait), None) => lock.try_acquire_for(wait).await?,
        (Some(wait), Some(lease)) => lock.try_acquire_with_lease(wait, lease).await?,
    };
    Ok(held.map(Held::Lock))
}

/// Waits for `acquire`, showing on stderr who holds the lock and for how long we have waited.
async fn waiting_line<F, T>(
    manager: &LockManager,
    (name, semaphore): (&str, bool),
    mut acquire: std::pin::Pin<&mut F>,
) -> T
where
    F: std::future::Future<Output = T>,
{
    const SPIN: [char; 4] = ['|', '/', '-', '\\'];
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let (mut shown, mut spin, mut holder) = (false, 0, String::new());
    loop {
        tokio::select! {
            done = &mut acquire => {
                if shown {
                    eprint!("\r\x1b[2K");
                }
                return done;
            }
            _ = tick.tick() => {
                if started.elapsed() < Duration::from_millis(500) {
                    continue;
                }
                if spin % 4 == 0 && semaphore {
                    holder = match manager.describe_synchronizer(name).await {
                        Ok(info) => format!("{} free, {} held", info.count.unwrap_or(0), info.held.len()),
                        Err(e) => e.to_string(),
                    };
                } else if spin % 4 == 0 {
                    holder = match manager.describe(name).await {
                        Ok(info) if info.is_held() => {
                            let who: Vec<_> = info.holders.iter().map(|h| crate::text::clean(&h.holder)).collect();
                            let ttl = info.ttl.map(|t| format!(", ttl {:.1}s", t.as_secs_f64())).unwrap_or_default();
                            format!("held by {}{ttl}", who.join(", "))
                        }
                        Ok(_) => "free, taking it".into(),
                        Err(e) => e.to_string(),
                    };
                }
                eprint!(
                    "\r\x1b[2K{} waiting for {name:?}: {holder}; waited {:.0}s",
                    SPIN[spin % 4],
                    started.elapsed().as_secs_f64()
                );
                shown = true;
                spin += 1;
            }
        }
    }
}

/// Runs the command while the lock is held (see [`supervise`]); returns the exit code, or 73
/// when the hold ended while it ran and the command was stopped.
async fn command(args: &ExecArgs, held: &Held, grace: Duration) -> Result<u8, Failure> {
    // Taken only now: while waiting for the lock, SIGINT and SIGTERM end lockman as usual.
    let mut signals = Signals::new()?;
    let mut command = tokio::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("LOCKMAN_LOCK", &args.name);
    if args.semaphore {
        command.env("LOCKMAN_SEMAPHORE", &args.name);
    }
    if let Some(token) = held.token() {
        command.env("LOCKMAN_FENCE", token.to_string());
    }
    let on_end = match args.on_lost {
        OnLost::Kill => OnEnd::Stop { grace },
        OnLost::Warn => OnEnd::Warn { grace },
    };
    let what = format!("{} {:?}", what(args), args.name);
    let ran = supervise(
        held,
        &what,
        &mut command,
        &args.command[0],
        on_end,
        &mut signals,
    )
    .await?;
    Ok(if ran.hold_ended && args.on_lost == OnLost::Kill {
        code::LOST
    } else {
        ran.code
    })
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

/// What `exec` takes: a lock, or a semaphore's permit.
fn what(args: &ExecArgs) -> &'static str {
    if args.semaphore { "permit of" } else { "lock" }
}
