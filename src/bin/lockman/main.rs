//! `lockman`: Redisson-compatible locks from the shell.
//!
//! ```text
//! lockman exec [--kind K] [--wait DUR] [--lease DUR] [--on-lost kill|warn] [--stop-grace DUR] NAME -- CMD [ARGS…]
//! lockman exec --semaphore --permits N [--wait DUR] [--lease DUR] NAME -- CMD [ARGS…]
//! lockman inspect NAME [--json]
//! lockman semaphore NAME [--set N] [--add D] [--drain] [--json]
//! lockman latch NAME [set N | count-down | wait [--timeout DUR]] [--json]
//! lockman unlock --force NAME [--yes] [--any-hash]
//! lockman watch NAME
//! lockman ls [PATTERN] [--json]
//! lockman top [PATTERN] [--once] [--json]
//! lockman elect [--once] [--stop-grace DUR] NAME -- CMD [ARGS…]
//! lockman leader NAME [--watch] [--json]
//! lockman doctor [--json]
//! ```
//!
//! Exit codes: see [`code`]; `exec` otherwise passes on its command's (128 + n for a signal).

mod clients;
mod doctor;
mod elect;
mod exec;
mod inspect;
mod json;
mod kinds;
mod server;
mod supervisor;
mod sync;
mod text;
mod watch;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use lockman::{LockError, LockManager};
use server::{PASSWORD_HINT, Server};
pub use server::{passing_refusal, strip_secrets};

/// The documented exit codes (README, "The lockman command").
pub mod code {
    /// `inspect`: the lock is free. `unlock`: it was not locked. `leader`: nobody leads.
    /// `doctor`: a check warned (⚠) and none failed.
    pub const FREE: u8 = 1;
    /// Bad usage (clap's own, or a `--stop-grace` too long for the hold's TTL).
    pub const USAGE: u8 = 2;
    /// Redis could not be reached, refused us, or answered an error.
    pub const REDIS: u8 = 69;
    /// `exec`: the lock was lost, or about to expire unrenewed, while the command ran (and the
    /// command was stopped); `elect --once`: the lead was.
    pub const LOST: u8 = 73;
    /// `doctor`: a check failed (✘): lockman cannot work on this deployment as configured.
    pub const UNFIT: u8 = 78;
    /// `exec`: the lock could not be had within `--wait`.
    pub const NOT_ACQUIRED: u8 = 75;
    /// `exec`: the command could not be run (not executable).
    pub const CANNOT_RUN: u8 = 126;
    /// `exec`: the command was not found.
    pub const NOT_FOUND: u8 = 127;
    /// `exec` waiting for the lock, `latch wait`: ended by SIGINT (as the shell reports a
    /// process that SIGINT killed).
    pub const INTERRUPTED: u8 = 128 + libc::SIGINT as u8;
}

/// Redisson-compatible distributed locks on Redis, from the shell.
#[derive(Parser, Debug)]
#[command(name = "lockman", version)]
struct Cli {
    #[command(flatten, next_help_heading = "Connection options")]
    server: Server,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a command while holding a lock: take it (waiting), run CMD with the watchdog renewing
    /// the lock, release it when CMD exits. Exits with CMD's code.
    ///
    /// CMD runs in a process group of its own (in the terminal's foreground if lockman is).
    /// If the lock is about to expire unrenewed, CMD's group gets SIGTERM (--stop-grace before
    /// the lock's guarantee ends) and SIGKILL when it ends; if the lock is known lost, SIGKILL
    /// at once; lockman then exits 73 (--on-lost warn: CMD runs on).
    ///
    /// On Linux, CMD dies with lockman: if lockman is killed (SIGKILL, the OOM killer), CMD gets
    /// SIGKILL at once instead of running on while the lock expires. Only CMD's own process is
    /// covered, not children it starts (a shell should `exec` its last command). Other systems
    /// have no such guarantee: there CMD outlives a killed lockman, and the next `exec` may
    /// start a second CMD beside it once the lock expires.
    ///
    /// CMD gets lockman's environment without lockman's secrets (LOCKMAN_URL, LOCKMAN_PASSWORD,
    /// LOCKMAN_MASTER_PASSWORD; --keep-env passes them on); REDIS_URL is passed on.
    Exec(exec::ExecArgs),
    /// Run a command only while leading the election NAME: campaign (waiting), run CMD with
    /// LOCKMAN_TERM set to the term; when the lead is about to expire unrenewed, stop CMD
    /// (SIGTERM --stop-grace before the lead's guarantee ends, SIGKILL to its process group
    /// when it ends), or when the lead is known lost (SIGKILL at once), then campaign again
    /// and restart it (--once: exit 73 instead). Exits with CMD's code when CMD exits by
    /// itself. CMD dies with lockman, and gets its environment without lockman's secrets, as
    /// for `exec`.
    Elect(elect::ElectArgs),
    /// Show who leads the election NAME and its term. Exit 0 if someone leads, 1 if nobody.
    Leader {
        /// The election name.
        name: String,
        /// Print every change of leader, until interrupted.
        #[arg(long)]
        watch: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show a lock: kind, holders and counts, TTL, mode, fair queue, fencing token, lock-delay.
    /// Exit 0 if held (or closed by its lock-delay), 1 if free.
    Inspect {
        /// The lock name.
        name: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Delete a lock whoever holds it, and wake its waiters (Redisson's forceUnlock); a
    /// reentrant lock's lock-delay key too, so that the name is open at once.
    Unlock {
        /// Required: this takes the lock from whoever holds it.
        #[arg(long, required = true)]
        force: bool,
        /// Do not ask for confirmation on a terminal.
        #[arg(long, short)]
        yes: bool,
        /// Delete the hash even when none of its fields looks like a lock holder
        /// (`<uuid>:<n>`) or `mode`: without it such a hash is refused (exit 2).
        #[arg(long)]
        any_hash: bool,
        /// The lock name.
        name: String,
    },
    /// Show a semaphore (free permits, held permits and whose) after setting, adding or draining
    /// permits. Exit 0 if it exists, 1 if not.
    Semaphore {
        /// The semaphore name.
        name: String,
        /// Set the permits when the semaphore has none.
        #[arg(long, value_name = "N")]
        set: Option<u32>,
        /// Add permits (negative: remove).
        #[arg(long, value_name = "D", allow_hyphen_values = true)]
        add: Option<i64>,
        /// Take every free permit.
        #[arg(long)]
        drain: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show a count-down latch, or set, count down or wait for it.
    Latch {
        /// The latch name.
        name: String,
        #[command(subcommand)]
        op: Option<sync::LatchOp>,
        /// Print JSON instead of text (when showing it).
        #[arg(long)]
        json: bool,
    },
    /// List the live lockman clients (service, host, pid) with their long holds and the names
    /// they wait on; PATTERN (`*` and `?`) keeps the names that match.
    Ls {
        /// Only names matching this glob.
        pattern: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Names by holding time and by waiters, refreshed every second; `q` quits. With stdout
    /// not a terminal, the text is one frame, as with --once.
    Top {
        /// Only names matching this glob.
        pattern: Option<String>,
        /// Print one frame and exit (always so for text when stdout is not a terminal).
        #[arg(long)]
        once: bool,
        /// Print JSON frames instead of the screen (one line each).
        #[arg(long)]
        json: bool,
    },
    /// Check what this deployment guarantees to locks, one line each (✔ ⚠ ✘ and what to do):
    /// server and version, scripting, LPOS, sharded pub/sub, permissions, eviction policy,
    /// persistence, replicas and WAIT, keyspace notifications, clock offset, round trip.
    /// Exit 0 if all is well, 1 on a warning, 78 on a failed check, 69 if unreachable.
    Doctor {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print a lock's acquire, release and expiry events as they happen, until Ctrl-C.
    Watch {
        /// The lock name.
        name: String,
    },
}

/// The lock kinds `exec` can take.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq)]
enum Kind {
    Lock,
    Fair,
    Read,
    Write,
    Fenced,
    /// Redisson 4.4's non-reentrant lock (the reentrant lock's keys).
    NonReentrant,
    /// Redisson 4.4's non-reentrant fair lock (the fair lock's keys).
    NonReentrantFair,
    /// Redisson's spin lock (the lock's keys; waits by polling, no pub/sub).
    Spin,
    /// Redisson's group multi-lock: NAME is the group's hash, each --member a field of it.
    Group,
}

/// `500ms`, `10s`, `2m`, `1h`, or a bare number of seconds.
fn duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 500ms, 10s, 2m, 1h)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        other => return Err(format!("unknown unit {other:?} (ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

impl Command {
    /// How long the subcommand waits for Redis, for those that wait (see `Server::start_wait`).
    fn start_wait(&self) -> Option<Duration> {
        match self {
            Command::Exec(args) => Some(args.wait().unwrap_or(Duration::MAX)),
            Command::Elect(_) => Some(Duration::MAX),
            Command::Latch {
                op: Some(sync::LatchOp::Wait { timeout }),
                ..
            } => Some(timeout.unwrap_or(Duration::MAX)),
            _ => None,
        }
    }

    /// The name the subcommand works on, for those that take one.
    fn name(&self) -> Option<&str> {
        match self {
            Command::Exec(args) => Some(args.name()),
            Command::Elect(args) => Some(args.name()),
            Command::Leader { name, .. }
            | Command::Inspect { name, .. }
            | Command::Unlock { name, .. }
            | Command::Semaphore { name, .. }
            | Command::Latch { name, .. }
            | Command::Watch { name } => Some(name),
            Command::Ls { .. } | Command::Top { .. } | Command::Doctor { .. } => None,
        }
    }

    /// Whether the subcommand runs a command under a hold (`exec`, `elect`).
    fn supervises(&self) -> bool {
        matches!(self, Command::Exec(_) | Command::Elect(_))
    }
}

/// How long a command waits for its manager's shutdown once its answer is ready: with Redis
/// healthy a shutdown takes milliseconds; with Redis frozen or gone its releases cannot be
/// confirmed anyway (each hold expires with its TTL), and waiting for their resends (up to a
/// third of the watchdog timeout) only kept the answer from the user.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(3);

/// Shuts `manager` down, waiting at most [`SHUTDOWN_LIMIT`].
pub async fn close(manager: &LockManager) {
    // Unconfirmed after the limit: Redis did not answer, and the holds expire with their TTL.
    let _ = tokio::time::timeout(SHUTDOWN_LIMIT, manager.shutdown()).await;
}

/// A one-line error and the exit code it means.
#[derive(Debug)]
pub struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    fn redis(e: LockError) -> Self {
        let code = match e {
            LockError::InvalidArgument { .. } => code::USAGE,
            _ => code::REDIS,
        };
        Self::new(code, said(&e))
    }

    /// The message on one line: a multi-line error from below joined with "; ".
    pub fn one_line(&self) -> String {
        let lines: Vec<&str> = self
            .message
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        lines.join("; ")
    }
}

/// Resolves at the first SIGINT from the call on (the handler is installed by the call, not
/// at the first poll). The handler replaces an ignored SIGINT too: a shell starts a background
/// job with SIGINT ignored, and `kill -INT` must still end a long-running subcommand.
pub fn interrupted() -> impl Future<Output = ()> {
    let signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt());
    async move {
        match signal {
            Ok(mut signal) => {
                signal.recv().await;
            }
            // No handler could be installed: SIGINT does what it did before.
            Err(_) => std::future::pending::<()>().await,
        }
    }
}

/// What `e` means, said for a person at a shell: the library's message, but for the causes
/// it reports in redis-rs's words, and without redis-rs's error-kind names.
pub fn said(e: &LockError) -> String {
    let text = match e {
        // What answered the first command was not RESP: an HTTP server, say, on that port.
        LockError::Connect { url, source } if source.kind() == redis::ErrorKind::Parse => {
            format!("{url} is not a Redis server (what answered does not speak RESP)")
        }
        LockError::Auth { url, .. } => {
            format!(
                "redis at {url} refused the user name or password: check them (the password: \
                 --password-file, $LOCKMAN_PASSWORD or the URL; an ACL user: \
                 redis://USER:PASSWORD@host:port)"
            )
        }
        // The library meets NOAUTH at its first command, as any Redis error.
        other if other.to_string().contains("NOAUTH") => {
            format!("redis wants a password (NOAUTH): {PASSWORD_HINT}")
        }
        other => match passing_refusal(other) {
            Some("LOADING") => "redis is loading its dataset into memory (LOADING) and answers \
                                nothing else until it has: retry shortly"
                .to_owned(),
            Some("BUSY") => "redis is busy running a script past busy-reply-threshold (BUSY): \
                             retry once it ends (SCRIPT KILL ends a script that wrote nothing)"
                .to_owned(),
            Some(code) => {
                format!("redis refused for a state that passes ({code}): retry shortly; {other}")
            }
            None => other.to_string(),
        },
    };
    without_kind_names(&text)
}

/// `text` without redis-rs's error-kind names (`… failed - AuthenticationFailed`,
/// `- InvalidClientConfig: detail`), which mean nothing to a person at a shell.
fn without_kind_names(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(" - ") {
        let after = &rest[at + 3..];
        let word_len = after
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(after.len());
        let word = &after[..word_len];
        let camel = word.len() > 2
            && word.starts_with(|c: char| c.is_ascii_uppercase())
            && word.chars().skip(1).any(|c| c.is_ascii_lowercase())
            && word.chars().skip(1).any(|c| c.is_ascii_uppercase());
        out.push_str(&rest[..at]);
        if camel {
            rest = &after[word_len..];
        } else {
            out.push_str(" - ");
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Sets `signal`'s disposition to the default.
fn default_disposition(signal: libc::c_int) {
    // SAFETY: signal(2) with SIG_DFL installs no handler and touches no memory of ours; it is
    // called before the runtime starts a thread.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    cli.server.holds = cli.command.supervises();
    cli.server.start_wait = cli.command.start_wait();
    if cli.command.name() == Some("") {
        // Refused before connecting: nothing is sent, no client record written.
        eprintln!("lockman: the name must not be empty");
        return ExitCode::from(code::USAGE);
    }
    if !cli.command.supervises() {
        // `lockman ls | head`: a closed pipe ends lockman quietly, as it does any filter,
        // instead of the panic of a failed print. `exec` and `elect` keep SIGPIPE ignored:
        // they must outlive a closed stdout to stop their command and release the hold.
        default_disposition(libc::SIGPIPE);
    }
    cli.server.warn();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lockman: cannot start: {e}");
            return ExitCode::from(code::REDIS);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Exec(args) => exec::run(&cli.server, args).await,
            Command::Elect(args) => elect::elect(&cli.server, args).await,
            Command::Leader { name, watch, json } => {
                elect::leader(&cli.server, &name, watch, json).await
            }
            Command::Inspect { name, json } => inspect::inspect(&cli.server, &name, json).await,
            Command::Unlock {
                name,
                yes,
                any_hash,
                ..
            } => inspect::unlock(&cli.server, &name, yes, any_hash).await,
            Command::Watch { name } => watch::run(&cli.server, &name).await,
            Command::Doctor { json } => doctor::doctor(&cli.server, json).await,
            Command::Ls { pattern, json } => {
                clients::ls(&cli.server, pattern.as_deref(), json).await
            }
            Command::Top {
                pattern,
                once,
                json,
            } => clients::top(&cli.server, pattern.as_deref(), once, json).await,
            Command::Semaphore {
                name,
                set,
                add,
                drain,
                json,
            } => sync::semaphore(&cli.server, &name, (set, add, drain), json).await,
            Command::Latch { name, op, json } => sync::latch(&cli.server, &name, op, json).await,
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("lockman: {}", failure.one_line());
            ExitCode::from(failure.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `{:?}` of the parsed command line shows no password: not the URL's (TCP or a socket's
    /// `?pass=`), not `--master-password`.
    #[test]
    fn the_command_lines_debug_shows_no_password() {
        for url in [
            "redis://app:Mk7pQz@127.0.0.1:6379/0",
            "redis+unix:///run/r.sock?pass=Mk7pQz",
            "redis//:Mk7pQz@127.0.0.1:6379",
            "redis://:Mk7pQz@10.0.0.1:26379,redis://:Mk7pQz@10.0.0.2:26379",
        ] {
            let cli = Cli::try_parse_from([
                "lockman",
                "--url",
                url,
                "--master-password",
                "Mk7pQz",
                "doctor",
            ])
            .expect("parses");
            let shown = format!("{cli:?}");
            assert!(!shown.contains("Mk7pQz"), "{shown}");
            assert!(shown.contains("***"), "{shown}");
        }
    }

    #[test]
    fn kind_names_are_taken_out_and_other_dashes_kept() {
        assert_eq!(
            without_kind_names(
                "redis at x refused: Password authentication failed - AuthenticationFailed"
            ),
            "redis at x refused: Password authentication failed"
        );
        assert_eq!(
            without_kind_names("bad - InvalidClientConfig: detail - ok - Not"),
            "bad: detail - ok - Not"
        );
    }
}
