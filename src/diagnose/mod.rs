//! What a deployment guarantees, read from the server and tried on it, and judged
//! (`LockManager::diagnose`, `lockman doctor`):
//!
//! - this file: the report, [`Diagnosis`], made of [`Check`]s;
//! - `facts.rs`: the reads (`INFO`, `CONFIG GET`, `COMMAND INFO`, `TIME`, `PING`, each on one
//!   server: in a cluster, the master of slot 0) and the scratch locks and synchronizers of
//!   `Commands::trial`, taken and given back through the scripts every lock runs;
//! - `judge/`: the judgement of what they showed, pure, by family of checks.

mod facts;
mod judge;

use judge::least_privilege_acl;
pub(crate) use judge::{eviction_risk, evicts_locks, judge};

/// How a [`Check`] came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CheckStatus {
    /// ✔: as lockman needs it.
    Ok,
    /// ⚠: works, but guarantees less than it could (the check's advice says what to change).
    Warn,
    /// ✘: lockman cannot work here, or not as configured.
    Fail,
}

impl CheckStatus {
    /// `✔`, `⚠` or `✘`.
    pub fn symbol(self) -> &'static str {
        match self {
            Self::Ok => "✔",
            Self::Warn => "⚠",
            Self::Fail => "✘",
        }
    }

    /// `ok`, `warn` or `fail` (the JSON of `lockman doctor --json`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "fail",
        }
    }
}

/// One line of a [`Diagnosis`]: what was checked, how it came out, what was seen, and what to
/// do about it (empty when nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Check {
    /// Which check: `server`, `tls`, `scripting`, `lpos`, `sharded_pubsub`, `acl`,
    /// `scratch_lock`, `eviction`, `persistence`, `replication`, `keyspace_events`, `clock`,
    /// `round_trip`.
    pub name: &'static str,
    /// How it came out.
    pub status: CheckStatus,
    /// What was seen, and what it means for locks.
    pub seen: String,
    /// What to do; empty when nothing.
    pub advice: String,
}

impl Check {
    /// A check: for reports that add their own lines (`lockman doctor` when the start failed).
    pub fn new(
        name: &'static str,
        status: CheckStatus,
        seen: impl Into<String>,
        advice: impl Into<String>,
    ) -> Self {
        Self {
            name,
            status,
            seen: seen.into(),
            advice: advice.into(),
        }
    }
}

/// What a deployment guarantees to lockman's locks, one [`Check`] per concern, read from the
/// server a [`LockManager`](crate::LockManager) is connected to
/// ([`LockManager::diagnose`](crate::LockManager::diagnose)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Diagnosis {
    /// The checks, in a fixed order.
    pub checks: Vec<Check>,
}

impl Diagnosis {
    /// A diagnosis of these checks: for reports made of their own lines (`lockman doctor` when
    /// the start failed).
    pub fn new(checks: Vec<Check>) -> Self {
        Self { checks }
    }

    /// The worst status of any check ([`CheckStatus::Ok`] when there are none).
    pub fn worst(&self) -> CheckStatus {
        self.checks
            .iter()
            .map(|c| c.status)
            .max()
            .unwrap_or(CheckStatus::Ok)
    }

    /// The check named `name`, if there is one.
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// The least-privilege ACL rule of docs/protocol.md ("ACL") for names under `prefix` (all
    /// names when empty), as one `ACL SETUSER` command with `<user>` and `<password>` to fill
    /// in: every kind of lock and synchronizer runs with it, and no dangerous command.
    pub fn least_privilege_acl(prefix: &str) -> String {
        least_privilege_acl(prefix)
    }
}
