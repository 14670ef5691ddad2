//! [`ClientInfo`]: the live client records (docs/protocol.md, "Client records") as
//! [`LockManager::clients`](crate::LockManager::clients) reads them: which managers are alive,
//! who they are, which names they have held long and which they wait on.

use std::time::Duration;

use crate::protocol::RawRecord;

/// One live manager, from its client record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientInfo {
    /// Its client id: the first part of its holder ids (`<client id>:<n>`).
    pub id: String,
    /// Its [`Config::client_name`](crate::Config::client_name).
    pub service: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: Option<u32>,
    /// Its lockman version.
    pub version: String,
    /// How long since it started (by its own clock against the server's).
    pub up: Option<Duration>,
    /// How many holds it has that are old enough to be renewed (a sixth of its watchdog
    /// timeout); [`holds`](Self::holds) lists the oldest of them.
    pub holds_total: usize,
    /// How many names its callers wait on; [`waits`](Self::waits) lists the most waited.
    pub waits_total: usize,
    /// Its long holds, the longest first.
    pub holds: Vec<HeldName>,
    /// The names its callers wait on, most waiters first.
    pub waits: Vec<WaitedName>,
    /// The cycles of waits (deadlocks) it broke or reported in the last ten minutes, newest
    /// first (at most five).
    pub deadlocks: Vec<RecentDeadlock>,
}

/// A cycle of waits a client found lately ([`crate::deadlock`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecentDeadlock {
    /// How long ago it was found, as of the read.
    pub ago: Duration,
    /// The cycle, as [`Cycle`](crate::deadlock::Cycle)'s `Display` says it: each owner, its
    /// service, and the kind and name it waits for.
    pub cycle: String,
}

/// A name a client has held long enough to be renewed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldName {
    /// The lock name.
    pub name: String,
    /// `lock`, `fenced`, `read`, `write`, `fair`, `non_reentrant`, `non_reentrant_fair`, or `permits` (a permit semaphore).
    pub kind: String,
    /// The holder id (permit ids for a permit semaphore).
    pub holder: String,
    /// How long it has been held, as of the read.
    pub held: Duration,
    /// A group lock's member count (0 for the other kinds).
    pub members_total: usize,
    /// A group lock's first members (at most three, and 96 bytes of names).
    pub members: Vec<String>,
}

/// A name a client's callers wait on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitedName {
    /// The lock name.
    pub name: String,
    /// How many of its callers wait.
    pub waiters: u32,
    /// How long the longest of them has waited, as of the read.
    pub waited: Duration,
}

impl ClientInfo {
    /// A record read at `now` (the server's epoch ms). Ages in the record are as of its last
    /// refresh (`seen`, the server's time then), so the time since is added.
    pub(crate) fn from_record(RawRecord { id, record }: RawRecord, now: u64) -> Self {
        let since_seen = record.seen.map_or(0, |seen| now.saturating_sub(seen));
        let age = |ms: u64| Duration::from_millis(ms.saturating_add(since_seen));
        let (holds_total, waits_total) = (record.holds.len(), record.waits.len());
        let mut holds: Vec<HeldName> = record
            .holds
            .into_iter()
            .map(|h| HeldName {
                name: h.name,
                kind: h.kind,
                holder: h.holder,
                held: age(h.held_ms),
                members_total: h.members_total,
                members: h.members,
            })
            .collect();
        let mut waits: Vec<WaitedName> = record
            .waits
            .into_iter()
            .map(|w| WaitedName {
                name: w.name,
                waiters: w.waiters,
                waited: age(w.waited_ms),
            })
            .collect();
        holds.sort_by(|a, b| b.held.cmp(&a.held).then_with(|| a.name.cmp(&b.name)));
        waits.sort_by(|a, b| {
            (b.waiters, b.waited)
                .cmp(&(a.waiters, a.waited))
                .then_with(|| a.name.cmp(&b.name))
        });
        Self {
            service: record.service,
            host: record.host,
            pid: record.pid,
            version: record.version,
            up: record
                .started
                .map(|s| Duration::from_millis(now.saturating_sub(s))),
            holds_total: record.holds_total.unwrap_or(holds_total),
            waits_total: record.waits_total.unwrap_or(waits_total),
            holds,
            waits,
            deadlocks: record
                .deadlocks
                .into_iter()
                .map(|(ago_ms, cycle)| RecentDeadlock {
                    ago: age(ago_ms),
                    cycle,
                })
                .collect(),
            id,
        }
    }

    /// Whether `holder` (`<client id>:<n>`, or a read-write lock's `…:write` field) is one of
    /// this client's holder ids.
    pub fn owns(&self, holder: &str) -> bool {
        holder
            .strip_prefix(self.id.as_str())
            .is_some_and(|rest| rest.starts_with(':'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_with_ages_as_of_the_read() {
        let f = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let record = RawRecord {
            id: "c1".to_owned(),
            record: crate::protocol::ClientRecord::decode(&[
                f("service", "billing"),
                f("host", "web1"),
                f("pid", "42"),
                f("version", "0.1.0"),
                f("started", "1000"),
                f("holds", "2"),
                f("hold:a", "500 lock c1:1"),
                f("hold:b", "9000 fair c1:2"),
                f("waits", "1"),
                f("wait:c", "3 200"),
                f("seen", "10000"),
            ]),
        };
        let c = ClientInfo::from_record(record, 10_100);
        assert_eq!(
            (c.service.as_str(), c.host.as_str(), c.pid),
            ("billing", "web1", Some(42))
        );
        assert_eq!(c.up, Some(Duration::from_millis(9_100)));
        assert_eq!(c.holds[0].name, "b");
        assert_eq!(c.holds[0].held, Duration::from_millis(9_100));
        assert_eq!(c.holds[1].held, Duration::from_millis(600));
        assert_eq!(c.waits[0].waiters, 3);
        assert_eq!(c.waits[0].waited, Duration::from_millis(300));
        assert!(c.owns("c1:2") && !c.owns("c12:2") && !c.owns("c1"));
    }
}
