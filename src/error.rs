//! The one error type of lockman.

use std::time::Duration;

/// Everything that can go wrong with a lock. Branch on behaviour with
/// [`is_retryable`](Self::is_retryable) rather than on messages.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// An argument or setting was refused before anything was sent to Redis.
    #[error("invalid {what}: {reason}")]
    InvalidArgument {
        /// Which argument.
        what: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// The caller's holder does not hold the lock (never did, released it, or lost it).
    #[error("lock {name:?} is not held by {holder}")]
    NotHeld {
        /// The lock name.
        name: String,
        /// The holder that tried to release it.
        holder: String,
    },
    /// A non-reentrant lock was acquired again by the holder that holds it (Redisson's
    /// `NON_REENTRANT_REACQUIRE`; Java throws `IllegalMonitorStateException`). Nothing changed in
    /// Redis: the hold it has stays as it was.
    #[error("lock {name:?} is non-reentrant and already held by this holder")]
    AlreadyHeld {
        /// The lock name.
        name: String,
    },
    /// The lock's key holds another Redis type: it is not a lock, and lockman left it alone.
    #[error("key {key:?} holds another redis type, not a lock")]
    WrongType {
        /// The key.
        key: String,
    },
    /// Redis could not be reached when the manager started.
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The URL (without its password, if any).
        url: String,
        /// What redis-rs said.
        #[source]
        source: redis::RedisError,
    },
    /// The TLS handshake failed; `failure` says how.
    #[error("tls with {url} failed: {failure} ({detail})")]
    Tls {
        /// The URL (without its password).
        url: String,
        /// What went wrong.
        failure: TlsFailure,
        /// What the TLS library said.
        detail: String,
    },
    /// Redis refused the user name or password.
    #[error("redis at {url} refused the credentials: {source}")]
    Auth {
        /// The URL (without its password).
        url: String,
        /// What redis-rs said.
        #[source]
        source: redis::RedisError,
    },
    /// The Redis ACL user lacks a permission lockman needs: a command, a key or a channel.
    #[error("the redis user may not {what}: {detail}")]
    NoPermission {
        /// What lockman tried: `run EVALSHA`, `publish on redisson_lock__channel:*`, …
        what: String,
        /// What Redis said.
        detail: String,
    },
    /// [`Config::sync_replicas`](crate::Config::sync_replicas): fewer replicas than asked
    /// acknowledged an acquire in time, so the grant is given back (released right after this
    /// error is answered).
    #[error("only {acked} of {wanted} replicas acknowledged the acquire in time; it is given back")]
    ReplicaSync {
        /// Replicas that acknowledged.
        acked: u32,
        /// Replicas asked for.
        wanted: u32,
    },
    /// The server the URL names is a read-only replica: locks need its primary (name the
    /// primary, or use [`Config::sentinel`](crate::Config::sentinel)). Found when the manager
    /// starts; a primary that becomes a replica later is a failover, retried while waiting.
    /// Never with Sentinel: a primary Sentinel named that answers as a replica at start was
    /// demoted since (a failover under way), so the start asks Sentinel again until the
    /// connect timeout (`tests/sentinel.rs`), then fails with a [`LockError::Redis`] with code
    /// `READONLY`, retryable ([`LockError::is_retryable`]). A Cluster's master answering as a
    /// replica at start fails with that retryable error at once (what the code does; no test
    /// yet makes a client start on a stale slot map).
    #[error("{url} is a read-only replica; lockman needs the primary")]
    ReadOnly {
        /// The URL (without its password, if any).
        url: String,
    },
    /// Redis is out of memory (`maxmemory` reached under the `noeviction` policy) and refused a
    /// write. Not retried: free memory, or choose an evicting policy that spares lock keys.
    #[error("redis is out of memory (maxmemory, noeviction) and refused {op}")]
    OutOfMemory {
        /// The step.
        op: &'static str,
    },
    /// A Redis command failed; `op` says which step.
    #[error("redis failed during {op}: {source}")]
    Redis {
        /// The step: `acquire`, `release`, `renew`, …
        op: &'static str,
        /// What redis-rs said.
        #[source]
        source: redis::RedisError,
    },
    /// A step did not finish in time.
    #[error("{op} timed out after {after:?}")]
    Timeout {
        /// The step.
        op: &'static str,
        /// How long it was given.
        after: Duration,
    },
    /// Redis replied something the protocol does not allow (another client wrote the keys?).
    #[error("unexpected reply during {op}: {detail}")]
    UnexpectedReply {
        /// The step.
        op: &'static str,
        /// The reply.
        detail: String,
    },
    /// A [`RedLock`](crate::RedLock) could not reach a majority of its members: too many of them
    /// failed (unreachable, timed out) for `needed` holds to be possible.
    #[error(
        "quorum not reached: {needed} of {members} members needed; the last attempt took {acquired}, {failed} failed"
    )]
    QuorumNotReached {
        /// Members held at the last attempt.
        acquired: usize,
        /// Members that failed at the last attempt.
        failed: usize,
        /// The quorum, `members / 2 + 1`.
        needed: usize,
        /// How many members there are.
        members: usize,
    },
    /// The server runs no scripts, and every lock is a script: a Valkey built or started
    /// without its Lua engine (Valkey 9.1 made scripting a part that can be left out), or a
    /// server whose `EVALSHA` and `SCRIPT` commands were renamed away. Found when the manager
    /// starts. Not a permission problem: no ACL can give it.
    #[error("{url} cannot run Lua scripts, which every lock needs: {detail}")]
    NoScripting {
        /// The URL (without its password, if any).
        url: String,
        /// What the server answered to `SCRIPT LOAD` (or, with only `EVALSHA` renamed away, to
        /// `EVALSHA`).
        detail: String,
    },
    /// [`Config::refuse_evicting_server`](crate::Config::refuse_evicting_server): the server's
    /// `maxmemory-policy` may evict lock keys under memory pressure (two holders), so the
    /// manager did not start. Set it to `noeviction`.
    #[error("{url} may evict lock keys (maxmemory-policy {policy}); lockman needs noeviction")]
    EvictingServer {
        /// The URL (without its password, if any).
        url: String,
        /// The server's `maxmemory-policy`.
        policy: String,
    },
    /// Redis did not answer this wait: its last attempt (or the last round trip of its name)
    /// ended without an answer from Redis (the connection refused, dropped or silent, a reply
    /// that never came) or with a refusal that passes (`READONLY`, `LOADING`, `MASTERDOWN`,
    /// `TRYAGAIN`, `CLUSTERDOWN`, `BUSY`, `NOREPLICAS`, too few replicas acknowledging). Not
    /// contention: nobody was seen holding the name at the end. Given at a bounded wait's
    /// deadline, or, for any wait, once Redis has failed for
    /// [`Config::unavailable_after`](crate::Config::unavailable_after) without an answer in
    /// between. Retryable: see the crate docs, "When Redis is away".
    #[error("redis is unavailable: waited {waited:?} for {name:?}; the last failure: {cause}")]
    Unavailable {
        /// The name waited for (a lock's, a synchronizer's or an election's).
        name: String,
        /// How long the wait lasted.
        waited: Duration,
        /// The last failure seen.
        #[source]
        cause: Box<LockError>,
    },
    /// The manager was shut down (or its actors are gone).
    #[error("the lock manager is shut down")]
    Shutdown,
    /// This wait closed a cycle of waits ([`Cycle`]): every owner in it waits for a lock the
    /// next one holds, so none would ever proceed. It was the youngest wait of the cycle and
    /// has left its queue, so the others go on. Nothing changed in Redis; the caller's other
    /// holds are still held: release them (usually by returning the error) and try again.
    /// See [`Config::deadlocks`](crate::Config::deadlocks). The message names each wait's place
    /// in the code ([`Step::place`]) and its scope's label ([`Step::label`]), and says what to do.
    #[error(
        "deadlock: {cycle}. Take these locks in one order everywhere, or retry: this wait was \
         broken so that the others go on, and the caller's other holds are still held (release \
         them, usually by returning this error, before trying again)"
    )]
    Deadlock {
        /// The cycle, starting with this wait.
        cycle: Cycle,
    },
    /// A guard's `scope` stopped its work because the hold is known to be lost (its key gone,
    /// force-unlocked, or unrenewable for a whole watchdog timeout).
    #[error("the hold of {name:?} is lost; its scoped work was stopped")]
    HoldLost {
        /// The lock (or semaphore, or election) name.
        name: String,
    },
    /// A guard's `scope` stopped its work because the hold's `valid_until` came within the
    /// scope's margin without a renewal confirmed by Redis: the key may expire soon, and then
    /// another holder may take it.
    #[error(
        "the hold of {name:?} was not renewed in time and may expire; its scoped work was stopped"
    )]
    HoldExpiring {
        /// The lock (or semaphore, or election) name.
        name: String,
    },
}

/// Whom a wait and a hold belong to, for deadlock detection ([`crate::deadlock`]): by default the
/// tokio task that called `acquire` (the thread, outside any task); inside
/// [`deadlock::scope`](crate::deadlock::scope), the scope's owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Owner {
    /// A tokio task (actix runs each actor and each spawned future as one), by its id.
    Task(u64),
    /// A thread, by its id: what a future run by `block_on` (the body of `#[tokio::main]`,
    /// of a `#[tokio::test]`, of `System::block_on`) has in place of a task.
    Thread(u64),
    /// An owner made by [`Owner::new`] and entered with [`deadlock::scope`](crate::deadlock::scope).
    Scope(u64),
}

/// Scope owners, for every manager of the process.
static NEXT_SCOPE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Owner {
    /// A new owner, unlike any other in this process: enter it with
    /// [`deadlock::scope`](crate::deadlock::scope) in every task that acts for it.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Owner::Scope(NEXT_SCOPE.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Task(n) => write!(f, "task {n}"),
            Owner::Thread(n) => write!(f, "thread {n}"),
            Owner::Scope(n) => write!(f, "scope {n}"),
        }
    }
}

/// A cycle of waits: each step's owner waits for a lock that the next step's owner holds, and
/// the last step's waits for one the first's holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle {
    /// The steps, the broken wait first.
    pub steps: Vec<Step>,
}

/// Where the user's code asked for a wait, for a [`Cycle`]'s message: the call site of the
/// acquire (the handles' acquire calls are `#[track_caller]`) and the label of the
/// [`deadlock::scope_labeled`](crate::deadlock::scope_labeled) it runs in. Made by
/// [`deadlock::site()`](crate::deadlock::site); carried by an `Acquire` message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// The acquire's call site.
    pub place: &'static std::panic::Location<'static>,
    /// The label of the scope it was made in, if any.
    pub label: Option<std::sync::Arc<str>>,
}

/// One wait of a [`Cycle`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Step {
    /// Whose wait it is.
    pub owner: Owner,
    /// The process it waits in: its manager's client id
    /// ([`LockManager::client_id`](crate::LockManager::client_id)).
    pub client: uuid::Uuid,
    /// That manager's service name ([`Config::client_name`](crate::Config::client_name)).
    pub service: String,
    /// The lock waited for, as given (without the name prefix).
    pub name: String,
    /// How it is waited for: `lock`, `fair`, `read`, `write`, … (the `kind` label of the
    /// metrics).
    pub kind: String,
    /// Where the user's code asked for the wait (`file:line:column` of the acquire call);
    /// `None` when unknown: a request sent without a [`Site`], or a wait in a process of an
    /// older version.
    pub place: Option<String>,
    /// The label of the [`deadlock::scope_labeled`](crate::deadlock::scope_labeled) the wait
    /// was made in.
    pub label: Option<String>,
}

impl Step {
    /// Who waits, as the message says it: the scope's label (with its owner, which tells two
    /// scopes of one label apart), else the owner; and its manager's service name.
    fn who(&self) -> Who<'_> {
        Who(self)
    }
}

struct Who<'a>(&'a Step);

impl std::fmt::Display for Who<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let step = self.0;
        // A label from another process is quoted as Debug: its control characters escaped.
        match &step.label {
            Some(label) => write!(
                f,
                "{label:?} ({} of {})",
                step.owner,
                Escaped(&step.service)
            ),
            None => write!(f, "{} of {}", step.owner, Escaped(&step.service)),
        }
    }
}

struct At<'a>(&'a Option<String>);

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(place) => write!(f, "at {}", Escaped(place)),
            None => f.write_str("at an unknown place"),
        }
    }
}

impl std::fmt::Display for Cycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some((first, rest)) = self.steps.split_first() else {
            return f.write_str("an empty cycle");
        };
        // `service`, `kind`, `place` and `label` of a step through another process come from
        // its waits hash, which anyone who may write lockman's keys can forge: escaped, so that
        // a newline cannot forge a log line nor an ESC drive a terminal (the name and the label
        // are quoted as Debug).
        write!(
            f,
            "{} {} waits for {} {:?}",
            first.who(),
            At(&first.place),
            Escaped(&first.kind),
            first.name
        )?;
        for step in rest {
            write!(
                f,
                " held by {}, which {} waits for {} {:?}",
                step.who(),
                At(&step.place),
                Escaped(&step.kind),
                step.name
            )?;
        }
        write!(f, " held by {}", first.who())
    }
}

/// Text from another process, written with every control character as a visible escape: C0
/// (newline and tab included) and DEL as `\x1b`, C1 as `\u{9b}`; everything else as it is.
struct Escaped<'a>(&'a str);

impl std::fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        for c in self.0.chars() {
            match c as u32 {
                n @ (0..=0x1f | 0x7f) => write!(f, "\\x{n:02x}")?,
                n @ 0x80..=0x9f => write!(f, "\\u{{{n:x}}}")?,
                _ => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// The most of a reply [`LockError::UnexpectedReply`] quotes: a reply may hold every client
/// record, megabytes on one line.
const DETAIL_BYTES: usize = 300;

/// How a TLS handshake failed ([`LockError::Tls`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The server's certificate is not signed by a trusted authority (or is expired, or
    /// malformed): give its CA with [`Config::tls_ca_pem`](crate::Config::tls_ca_pem).
    UntrustedCertificate,
    /// The certificate is trusted but names another host than the URL's.
    HostnameMismatch,
    /// What answered is not TLS: a plain-TCP Redis behind a `rediss://` URL?
    NotTls,
    /// The server ended the handshake: it wants a client certificate, or rejected the one sent.
    RejectedByServer,
    /// Something else; the error's detail says what.
    Other,
}

impl std::fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::UntrustedCertificate => "the server's certificate is not trusted",
            Self::HostnameMismatch => "the server's certificate is for another host name",
            Self::NotTls => "the server does not speak tls (a plain-tcp port?)",
            Self::RejectedByServer => "the server rejected the handshake (client certificate?)",
            Self::Other => "handshake failed",
        })
    }
}

/// Redis error codes that describe a passing state of the deployment: a replica that was the
/// primary (failover), a server loading its data, a cluster slot moving.
/// `BUSY` (another client's script runs past `busy-reply-threshold`) ends when the script ends
/// or is killed; `NOREPLICAS` (`min-replicas-to-write` not met) when a replica comes back.
const TRANSIENT_CODES: [&str; 7] = [
    "READONLY",
    "LOADING",
    "MASTERDOWN",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "BUSY",
    "NOREPLICAS",
];

/// The error reply of a non-reentrant lock's acquire by its holder (Redisson's `REENTRY_ERR`).
const NON_REENTRANT_REACQUIRE: &str = "NON_REENTRANT_REACQUIRE";

impl LockError {
    /// Whether trying the same call again later may succeed: connection trouble and time-outs
    /// are retryable; bad arguments, wrong types, `NotHeld` and shutdown are not.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::QuorumNotReached { .. } | Self::Unavailable { .. } => true,
            _ => self.is_outage(),
        }
    }

    /// Whether this error says Redis did not answer, or refused for a passing state of the
    /// deployment: the errors a wait retries until its end and then reports as
    /// [`LockError::Unavailable`]. An answer of Redis that is not an outage (a holder, a
    /// refusal that needs a person: `OOM`, `NOPERM`) is not one.
    pub(crate) fn is_outage(&self) -> bool {
        match self {
            Self::Connect { .. } | Self::Timeout { .. } | Self::ReplicaSync { .. } => true,
            Self::Redis { source, .. } => {
                source.is_io_error()
                    || source.is_timeout()
                    || source.is_connection_dropped()
                    || source.is_connection_refusal()
                    || source.code().is_some_and(|c| TRANSIENT_CODES.contains(&c))
            }
            _ => false,
        }
    }

    /// A refused connection during step `op`: an outage, for the tests of the pure states,
    /// which name no connection type of their own.
    #[cfg(test)]
    pub(crate) fn connection_refused(op: &'static str) -> Self {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        Self::Redis {
            op,
            source: redis::RedisError::from(io),
        }
    }

    /// The cause of an outage begun by the pub/sub connection's loss (`why`).
    pub(crate) fn pubsub_lost(why: &'static str) -> Self {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionAborted, why);
        Self::Redis {
            op: "pub/sub",
            source: redis::RedisError::from(io),
        }
    }

    /// This error, with `waited` as an [`LockError::Unavailable`]'s wait (the caller's, from its
    /// call); any other error as it is.
    pub(crate) fn waited_for(self, waited: Duration) -> Self {
        match self {
            Self::Unavailable { name, cause, .. } => Self::Unavailable {
                name,
                waited,
                cause,
            },
            other => other,
        }
    }

    /// [`LockError::Unavailable`] for a wait of `name` that lasted `waited`, whose last failure
    /// was `cause`.
    pub(crate) fn unavailable(name: &str, waited: Duration, cause: LockError) -> Self {
        Self::Unavailable {
            name: name.to_owned(),
            waited,
            cause: Box::new(cause),
        }
    }

    /// Whether this error hints that the primary moved: a replica answered, or the connection
    /// dropped or was refused.
    pub(crate) fn hints_failover(&self) -> bool {
        match self {
            Self::Redis { source, .. } | Self::Connect { source, .. } => {
                source.is_connection_dropped()
                    || source.is_connection_refusal()
                    || source.is_io_error()
                    || matches!(source.code(), Some("READONLY" | "MASTERDOWN"))
            }
            Self::Timeout { .. } => true,
            _ => false,
        }
    }

    /// Whether the failed step may still have run on the server: its reply timed out or its
    /// connection dropped after sending.
    pub(crate) fn outcome_unknown(&self) -> bool {
        match self {
            Self::Timeout { .. } => true,
            Self::Redis { source, .. } => source.is_timeout() || source.is_connection_dropped(),
            _ => false,
        }
    }

    /// [`LockError::UnexpectedReply`] of step `op`, its detail cut to its first
    /// [`DETAIL_BYTES`] (at a character boundary) and the size of the rest.
    pub(crate) fn unexpected_reply(op: &'static str, detail: impl Into<String>) -> Self {
        let mut detail = detail.into();
        if detail.len() > DETAIL_BYTES {
            let mut end = DETAIL_BYTES;
            while !detail.is_char_boundary(end) {
                end -= 1;
            }
            let cut = detail.len() - end;
            detail.truncate(end);
            detail.push_str(&format!("… ({cut} more bytes)"));
        }
        Self::UnexpectedReply { op, detail }
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidArgument {
            what,
            reason: reason.into(),
        }
    }

    /// [`LockError::NoPermission`] for `what` when Redis refused for want of an ACL permission
    /// (NOPERM, which a script's `redis.call` reports inside its error text); `None` otherwise.
    /// The one place that recognises a refusal, for script calls and the start-time probe alike.
    pub(crate) fn no_permission(
        what: impl FnOnce() -> String,
        source: &redis::RedisError,
    ) -> Option<Self> {
        // A script's refused command or key comes without the code: Redis 7.0 says "The user
        // executing the script can't run this command or subcommand" (or "can't access at
        // least one of the keys"), Valkey "ACL failure in script: User u has no permissions
        // to run the 'rpush' command".
        let text = source.to_string();
        let refused = source.code() == Some("NOPERM")
            || text.contains("NOPERM")
            || text.contains("The user executing the script can't")
            || text.contains("ACL failure in script");
        refused.then(|| Self::NoPermission {
            what: what(),
            detail: source.to_string(),
        })
    }

    /// Classifies a redis-rs error of step `op` on `key`.
    pub(crate) fn redis(op: &'static str, key: &str, source: redis::RedisError) -> Self {
        let wrong_type =
            source.code() == Some("WRONGTYPE") || source.to_string().contains("WRONGTYPE");
        if wrong_type {
            return Self::WrongType {
                key: key.to_owned(),
            };
        }
        if source.code() == Some(NON_REENTRANT_REACQUIRE)
            || source.to_string().contains(NON_REENTRANT_REACQUIRE)
        {
            return Self::AlreadyHeld {
                name: key.to_owned(),
            };
        }
        if let Some(refused) = Self::no_permission(|| format!("{op} on {key:?}"), &source) {
            return refused;
        }
        if source.code() == Some("OOM") {
            return Self::OutOfMemory { op };
        }
        Self::Redis { op, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_escapes_what_other_processes_wrote() {
        let step = |service: &str, kind: &str, name: &str| Step {
            owner: Owner::Task(1),
            client: uuid::Uuid::nil(),
            service: service.into(),
            name: name.into(),
            kind: kind.into(),
            place: None,
            label: None,
        };
        let cycle = Cycle {
            steps: vec![
                Step {
                    place: Some("src/orders.rs:12:5".into()),
                    label: Some("checkout".into()),
                    ..step("orders", "lock", "x")
                },
                Step {
                    place: Some("src/x.rs:1:1\n2026-01-01 WARN forged".into()),
                    label: Some("l\x1b[31m".into()),
                    ..step(
                        "evil\n2026-01-01 WARN forged\x1b[31m\u{9b}",
                        "lock\r\x07",
                        "y\n",
                    )
                },
            ],
        };
        let text = cycle.to_string();
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert_eq!(
            text,
            "\"checkout\" (task 1 of orders) at src/orders.rs:12:5 waits for lock \"x\" held by \
             \"l\\u{1b}[31m\" (task 1 of evil\\x0a2026-01-01 WARN forged\\x1b[31m\\u{9b}), which \
             at src/x.rs:1:1\\x0a2026-01-01 WARN forged waits for lock\\x0d\\x07 \"y\\n\" held by \
             \"checkout\" (task 1 of orders)"
        );
        // A step without a label shows its owner; without a place, says so.
        let plain = Cycle {
            steps: vec![step("s", "lock", "x"), step("s", "fair", "y")],
        };
        assert_eq!(
            plain.to_string(),
            "task 1 of s at an unknown place waits for lock \"x\" held by task 1 of s, which at \
             an unknown place waits for fair \"y\" held by task 1 of s"
        );
        // The error says what to do.
        let error = LockError::Deadlock { cycle: plain }.to_string();
        assert!(error.starts_with("deadlock: task 1 of s at"), "{error}");
        assert!(
            error.contains("Take these locks in one order everywhere, or retry"),
            "{error}"
        );
    }

    #[test]
    fn an_unexpected_reply_quotes_a_few_hundred_bytes_at_most() {
        let short = LockError::unexpected_reply("op", "int(1)");
        assert_eq!(short.to_string(), "unexpected reply during op: int(1)");
        // Multi-byte characters across the cut: cut at a character boundary.
        let long = LockError::unexpected_reply("read clients", "é".repeat(1_000_000));
        let LockError::UnexpectedReply { detail, .. } = &long else {
            panic!("{long:?}");
        };
        assert!(detail.len() < DETAIL_BYTES + 40, "{}", detail.len());
        assert!(detail.ends_with("… (1999700 more bytes)"), "{detail}");
    }
}
