//! `lockman exec`: run a command under a lock.

use std::convert::Infallible;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use lockman::deadlock::Deadlocks;
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
    /// Pass lockman's own secrets on to CMD: $LOCKMAN_URL, $LOCKMAN_PASSWORD and
    /// $LOCKMAN_MASTER_PASSWORD are taken out of its environment otherwise ($REDIS_URL and
    /// everything else is passed on).
    #[arg(long)]
    keep_env: bool,
    /// With --kind group: a member to take (repeat for each; all are taken in one script, or
    /// none). Redisson writes each value hashed: give the field it writes to share one with Java.
    #[arg(long = "member", value_name = "MEMBER")]
    members: Vec<String>,
    /// The lock name.
    name: String,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, num_args = 1..)]
    command: Vec<String>,
}

impl ExecArgs {
    /// The name given on the command line.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `--wait`, if given.
    pub fn wait(&self) -> Option<Duration> {
        self.wait
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq)]
enum OnLost {
    Kill,
    Warn,
}

pub async fn run(server: &Server, mut args: ExecArgs) -> Result<u8, Failure> {
    let began = Instant::now();
    let asked = args.wait;
    // The hold's TTL: the lease, or the watchdog timeout of a renewed hold.
    let grace = stop_grace(
        args.stop_grace,
        args.lease.unwrap_or(server.watchdog_timeout),
        args.lease.is_none(),
    )?;
    // Deadlocks are not looked for: a waiting `exec` holds nothing, so its wait closes no
    // cycle, and looking would only cost Redis calls (a wait that lasts a second is published
    // and probed, three scripts every half second, whoever watches).
    let manager = server
        .start(server.config()?.deadlocks(Deadlocks::Off))
        .await?;
    // A start that waited out a passing refusal took that time from the wait.
    args.wait = asked.map(|w| w.saturating_sub(began.elapsed()));
    let acquired = {
        let acquire = async {
            let acquire = acquire(&manager, &args);
            tokio::pin!(acquire);
            if std::io::stderr().is_terminal() {
                waiting_line(&manager, (&args.name, args.semaphore), acquire).await
            } else {
                acquire.await
            }
        };
        // SIGINT while waiting gives up the wait (and a fair lock's place) and exits as the
        // shell reports an interrupted command, also when it was started with SIGINT ignored.
        tokio::select! {
            acquired = acquire => acquired,
            () = crate::interrupted() => {
                crate::close(&manager).await;
                return Ok(code::INTERRUPTED);
            }
        }
    };
    let held = match acquired {
        Ok(Some(held)) => held,
        Ok(None) => {
            let waited = asked.unwrap_or_default();
            let why = delayed(&manager, &args).await;
            crate::close(&manager).await;
            return Err(Failure::new(
                code::NOT_ACQUIRED,
                format!(
                    "{} {:?} not acquired within {waited:?}{why}",
                    what(&args),
                    args.name
                ),
            ));
        }
        Err(e) => {
            let wanted = if args.semaphore {
                "a permit semaphore"
            } else {
                kind_words(args.kind)
            };
            let failure = crate::kinds::failure(&manager, &args.name, wanted, e).await;
            crate::close(&manager).await;
            return Err(failure);
        }
    };
    let outcome = command(&args, &held, grace).await;
    if let Err(e) = held.release().await
        && !matches!(e, LockError::NotHeld { .. })
    {
        eprintln!("lockman: releasing {:?}: {e}", args.name);
    }
    crate::close(&manager).await;
    outcome
}

/// Why a reentrant lock's wait timed out with nobody holding the lock: its lock-delay (the
/// delay key outlives the last hold, docs/protocol.md "Lock-delay"), said after the timeout;
/// empty otherwise (a holder, or the read failed: the timeout is said alone).
async fn delayed(manager: &LockManager, args: &ExecArgs) -> String {
    if args.semaphore || args.kind != Kind::Lock {
        return String::new();
    }
    match manager.describe(&args.name).await {
        Ok(info) if !info.is_held() => info.delay.map_or(String::new(), |left| {
            format!(
                ": nobody holds it, but its lock-delay closes it for {:.1}s more (the last \
                 hold ended or was lost less than --lock-delay ago; `lockman unlock --force` \
                 opens it)",
                left.as_secs_f64()
            )
        }),
        _ => String::new(),
    }
}

/// The kind `--kind` asks for, in the words of a wrong-kind error.
fn kind_words(kind: Kind) -> &'static str {
    match kind {
        Kind::Lock | Kind::NonReentrant | Kind::Spin => "a lock",
        Kind::Fair | Kind::NonReentrantFair => "a fair lock",
        Kind::Read | Kind::Write => "a read-write lock",
        Kind::Fenced => "a fenced lock",
        Kind::Group => "a group lock",
    }
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
        Kind::Spin => manager.spin_lock(name),
        Kind::Group => (*manager.group_lock(name, args.members.iter().cloned())?).clone(),
    };
    if args.kind != Kind::Group && !args.members.is_empty() {
        return Err(LockError::InvalidArgument {
            what: "--member",
            reason: "only with --kind group".to_owned(),
        });
    }
    let held = match (args.wait, args.lease) {
        (None, None) => Some(lock.acquire().await?),
        (None, Some(lease)) => Some(lock.acquire_with_lease(lease).await?),
        (Some(wait), None) => lock.try_acquire_for(wait).await?,
        (Some(wait), Some(lease)) => lock.try_acquire_with_lease(wait, lease).await?,
    };
    Ok(held.map(Held::Lock))
}

/// Waits for `acquire`, showing on stderr who holds the lock and for how long we have waited,
/// on one line that fits the terminal (called only when stderr is one: nobody else sees the
/// line, and its reads of the lock and the records are Redis calls).
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
    let (mut shown, mut spin, mut state) = (false, 0, String::new());
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
                    state = match manager.describe_synchronizer(name).await {
                        Ok(info) => format!("{} free, {} held", info.count.unwrap_or(0), info.held.len()),
                        Err(e) => e.to_string(),
                    };
                } else if spin % 4 == 0 {
                    state = match manager.describe(name).await {
                        Ok(info) if info.is_held() => {
                            let clients = manager.clients().await.unwrap_or_default();
                            let who: Vec<_> = info
                                .holders
                                .iter()
                                .map(|h| {
                                    crate::elect::holder_text(
                                        &h.holder,
                                        clients.iter().find(|c| c.owns(&h.holder)),
                                    )
                                })
                                .collect();
                            let ttl = info.ttl.map(|t| format!(", ttl {:.1}s", t.as_secs_f64())).unwrap_or_default();
                            format!("held by {}{ttl}", who.join(", "))
                        }
                        Ok(_) => "free, taking it".into(),
                        Err(e) => e.to_string(),
                    };
                }
                let line = waiting_text(SPIN[spin % 4], name, &state, started.elapsed(), columns());
                eprint!("\r\x1b[2K{line}");
                shown = true;
                spin += 1;
            }
        }
    }
}

/// The waiting line, in fewer than `columns` characters: a line as wide as the terminal would
/// wrap (on some terminals) and every redraw would then add a row. What is cut is the state in
/// the middle, so that the name and the time waited stay.
fn waiting_text(spin: char, name: &str, state: &str, waited: Duration, columns: usize) -> String {
    let width = columns.saturating_sub(1).max(1);
    let head = format!("{spin} waiting for {name:?}: ");
    let tail = format!("; waited {:.0}s", waited.as_secs_f64());
    let room = width.saturating_sub(head.chars().count() + tail.chars().count());
    let line = if room >= 12 {
        format!("{head}{}{tail}", crate::clients::fit(state, room))
    } else {
        format!("{head}{state}{tail}")
    };
    crate::clients::fit(&line, width)
}

/// The columns of the terminal on stderr, else `$COLUMNS`, else 80.
fn columns() -> usize {
    // SAFETY: TIOCGWINSZ fills the winsize it is given, and only reads fd 2.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    if unsafe { libc::ioctl(2, libc::TIOCGWINSZ, &mut size) } == 0 && size.ws_col > 0 {
        return usize::from(size.ws_col);
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&c| c > 0)
        .unwrap_or(80)
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
    crate::strip_secrets(&mut command, args.keep_env);
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

/// What `exec` takes: a lock, or a semaphore's permit.
fn what(args: &ExecArgs) -> &'static str {
    if args.semaphore { "permit of" } else { "lock" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_waiting_line_fits_the_terminal_and_keeps_the_time_waited() {
        let state = "held by billing-service-with-a-long-name@build-host-17.example.internal:24331, \
                     ttl 27.5s";
        let waited = Duration::from_secs(12);
        for columns in [200, 80, 60, 40, 20, 5, 1] {
            let line = waiting_text('|', "orders:42", state, waited, columns);
            assert!(line.chars().count() < columns.max(2), "{columns}: {line:?}");
        }
        let wide = waiting_text('|', "orders:42", state, waited, 200);
        assert_eq!(
            wide,
            format!("| waiting for \"orders:42\": {state}; waited 12s")
        );
        let narrow = waiting_text('|', "orders:42", state, waited, 80);
        assert!(
            narrow.starts_with("| waiting for \"orders:42\": held by billing"),
            "{narrow}"
        );
        assert!(narrow.ends_with("…; waited 12s"), "{narrow}");
    }
}
