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
    /// The manager was shut down (or its actors are gone).
    #[error("the lock manager is shut down")]
    Shutdown,
}

impl LockError {
    /// Whether trying the same call again later may succeed: connection trouble and time-outs
    /// are retryable; bad arguments, wrong types, `NotHeld` and shutdown are not.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Connect { .. } | Self::Timeout { .. } | Self::QuorumNotReached { .. } => true,
            Self::Redis { source, .. } => {
                source.is_io_error()
                    || source.is_timeout()
                    || source.is_connection_dropped()
                    || source.is_connection_refusal()
            }
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

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidArgument {
            what,
            reason: reason.into(),
        }
    }

    /// Classifies a redis-rs error of step `op` on `key`.
    pub(crate) fn redis(op: &'static str, key: &str, source: redis::RedisError) -> Self {
        let wrong_type =
            source.code() == Some("WRONGTYPE") || source.to_string().contains("WRONGTYPE");
        if wrong_type {
            Self::WrongType {
                key: key.to_owned(),
            }
        } else {
            Self::Redis { op, source }
        }
    }
}
