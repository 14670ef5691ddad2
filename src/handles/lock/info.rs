//! [`LockInfo`]: what Redis holds about a lock, whatever its kind, read in one round trip.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::protocol::Described;

/// The shape of a lock as its keys show it: a read-write lock has a `mode` field, a fair lock a
/// queue, a fenced lock a token counter (which outlives its holds). A free lock that left no key
/// reads as [`Plain`](Self::Plain).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockShape {
    /// A reentrant lock (or nothing at all).
    Plain,
    /// A fair lock.
    Fair,
    /// A read-write lock.
    ReadWrite,
    /// A fenced lock.
    Fenced,
    /// A group multi-lock: its holders are the owners of its members, each counted by its
    /// highest `lock_count` on an unexpired member.
    Group,
}

impl LockShape {
    /// `plain`, `fair`, `read-write`, `fenced` or `group`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockShape::Plain => "plain",
            LockShape::Fair => "fair",
            LockShape::ReadWrite => "read-write",
            LockShape::Fenced => "fenced",
            LockShape::Group => "group",
        }
    }
}

/// One holder of a lock and how many times it holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// The holder id, `<client uuid>:<n>`.
    pub holder: String,
    /// Its hold count (re-entries included).
    pub count: u32,
    /// For a read-write lock: whether this count is of the write side.
    pub write: bool,
}

/// A fair lock's waiter, in queue order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedWaiter {
    /// The waiter's holder id.
    pub holder: String,
    /// How long until its place times out, on this machine's clock (zero when overdue).
    pub times_out_in: Duration,
}

/// What Redis holds about one lock, from [`LockManager::describe`](crate::LockManager::describe).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    /// The lock name.
    pub name: String,
    /// Which kind of lock its keys show.
    pub shape: LockShape,
    /// Its holders, with their counts (none when free).
    pub holders: Vec<Holding>,
    /// How long until it expires unless renewed (`None` when free).
    pub ttl: Option<Duration>,
    /// A read-write lock's mode now: `read` or `write`.
    pub mode: Option<String>,
    /// A fair lock's queue.
    pub queue: Vec<QueuedWaiter>,
    /// A fenced lock's newest token.
    pub token: Option<u64>,
    /// How long the reentrant lock's delay key lives on (`Config::lock_delay`,
    /// docs/protocol.md "Lock-delay"), when there is one: until then lockman's clients with a
    /// lock-delay do not take the name, even when nobody holds it. `None` also for a user who
    /// may not read `lockman_delay:*` keys.
    pub delay: Option<Duration>,
}

impl LockInfo {
    /// A group multi-lock's hash: each member field names its owner; the owner holds it while
    /// its `<member>:<owner>:expire_time` is not past (by the server's clock when read).
    fn group(name: &str, d: Described) -> Self {
        let fields: std::collections::HashMap<&str, &str> = d
            .fields
            .iter()
            .map(|(f, v)| (f.as_str(), v.as_str()))
            .collect();
        let now_ms = d.now_ms.unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        });
        let mut holders: Vec<Holding> = Vec::new();
        for (member, owner) in &d.fields {
            if member.contains(':') {
                continue;
            }
            let ends = fields
                .get(format!("{member}:{owner}:expire_time").as_str())
                .and_then(|v| v.parse::<u64>().ok());
            if ends.is_none_or(|ends| ends < now_ms) {
                continue;
            }
            let count = fields
                .get(format!("{member}:{owner}:lock_count").as_str())
                .and_then(|v| v.parse::<u32>().ok())
                .unwrap_or(0);
            match holders.iter_mut().find(|h| h.holder == *owner) {
                Some(h) => h.count = h.count.max(count),
                None => holders.push(Holding {
                    holder: owner.clone(),
                    count,
                    write: false,
                }),
            }
        }
        Self {
            name: name.to_owned(),
            shape: LockShape::Group,
            ttl: if holders.is_empty() { None } else { d.ttl },
            holders,
            mode: None,
            queue: Vec::new(),
            token: d.token,
            // A group lock has no lock-delay (only the reentrant lock does).
            delay: None,
        }
    }

    /// Whether anyone holds it.
    pub fn is_held(&self) -> bool {
        !self.holders.is_empty()
    }

    pub(crate) fn new(name: &str, d: Described) -> Self {
        if d.fields.iter().any(|(f, _)| f.ends_with(":expire_time")) {
            return Self::group(name, d);
        }
        let mut mode = None;
        let mut holders = Vec::new();
        for (field, value) in d.fields {
            if field == "mode" {
                mode = Some(value);
                continue;
            }
            let count = value.parse().unwrap_or(0);
            match field.strip_suffix(":write") {
                Some(holder) => holders.push(Holding {
                    holder: holder.to_owned(),
                    count,
                    write: true,
                }),
                None => holders.push(Holding {
                    holder: field,
                    count,
                    write: false,
                }),
            }
        }
        // The deadlines are the server's clock (lockman's waiters) or their client's (Redisson's):
        // counted from the server's, not this reader's, whose clock may be off.
        let now_ms = d.now_ms.map_or_else(
            || {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_millis() as f64)
                    .unwrap_or(0.0)
            },
            |ms| ms as f64,
        );
        let deadline = |holder: &str| {
            d.deadlines
                .iter()
                .find(|(h, _)| h == holder)
                .and_then(|(_, ms)| ms.parse::<f64>().ok())
        };
        let queue = d
            .queue
            .iter()
            .map(|holder| QueuedWaiter {
                holder: holder.clone(),
                times_out_in: deadline(holder)
                    .map(|ms| Duration::from_millis((ms - now_ms).max(0.0) as u64))
                    .unwrap_or_default(),
            })
            .collect::<Vec<_>>();
        let shape = if mode.is_some() {
            LockShape::ReadWrite
        } else if !queue.is_empty() || !d.deadlines.is_empty() {
            LockShape::Fair
        } else if d.token.is_some() {
            LockShape::Fenced
        } else {
            LockShape::Plain
        };
        Self {
            name: name.to_owned(),
            shape,
            ttl: if holders.is_empty() { None } else { d.ttl },
            holders,
            mode,
            queue,
            token: d.token,
            delay: d.delay,
        }
    }
}
