//! The Watchdog's third job: this manager's client record (docs/protocol.md, "Client
//! records"), written when the manager is first used ([`FirstUse`]) and every renewal interval. Its format is `protocol/clients.rs`'s; what goes
//! in it is decided here.

use std::time::Instant;

use actix::prelude::*;
use rustc_hash::FxHashMap;

use super::Watchdog;
use super::renewal::{RenewKey, Tracked};
use crate::actors::messages::Renewal;
use crate::config::Config;
use crate::error::LockError;
use crate::protocol::{ClientRecord, LockKind, MAX_LISTED, RecordedHold, RecordedWait};

/// The manager is about to hold or wait for the first time (its first per-name actor is
/// starting): its record is written now rather than one renewal interval after start, so that
/// `lockman ls` and `inspect` name a short-lived process (a `lockman exec`) at once. Sent once
/// in a manager's life, by the Registry: nothing on any acquire's path.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct FirstUse;

impl Handler<FirstUse> for Watchdog {
    /// Done when the write is (or when there is none to make).
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: FirstUse, _: &mut Context<Self>) -> Self::Result {
        let write = (!self.halted && !self.record.written)
            .then(|| self.record_write(Instant::now()))
            .flatten();
        write.unwrap_or_else(|| Box::pin(actix::fut::ready(())))
    }
}

/// The client record's state: who this manager is, and whether the record is written.
pub(super) struct RecordWriter {
    pub(super) id: String,
    /// The fields that never change: service, host, pid, version, started.
    identity: ClientRecord,
    /// A write under way (a slow Redis must not pile them up).
    writing: bool,
    /// Whether one was written (there is one to delete at shutdown).
    pub(super) written: bool,
    /// The user may not write it (no permission for `lockman_client:*`): skipped for good,
    /// after one warning.
    pub(super) off: bool,
}

impl RecordWriter {
    pub(super) fn new(config: &Config, client_id: uuid::Uuid) -> Self {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self {
            id: client_id.hyphenated().to_string(),
            identity: ClientRecord {
                service: config.get_client_name(),
                host: host_name(),
                pid: Some(std::process::id()),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                started: Some(started),
                ..ClientRecord::default()
            },
            writing: false,
            written: false,
            off: false,
        }
    }

    /// A restarted Watchdog's: the write under way went with the old context.
    pub(super) fn restarted(&mut self) {
        self.writing = false;
    }
}

impl Watchdog {
    /// Writes the client record (unless one is being written, or records are off).
    pub(super) fn write_record(&mut self, ctx: &mut Context<Self>, now: Instant) {
        if let Some(write) = self.record_write(now) {
            ctx.spawn(write);
        }
    }

    /// The write of the client record, to run on this actor; `None` while one is being
    /// written, or when records are off.
    fn record_write(&mut self, now: Instant) -> Option<ResponseActFuture<Self, ()>> {
        if self.record.off || self.record.writing {
            return None;
        }
        let record = self.client_record(now);
        self.record.writing = true;
        self.record.written = true;
        let (commands, id, ttl) = (
            self.commands.clone(),
            self.record.id.clone(),
            self.renewals.timeout,
        );
        let write = async move { commands.write_client_record(&id, ttl, &record).await };
        Some(Box::pin(write.into_actor(self).map(|res, act, _| {
            act.record.writing = false;
            match res {
                Ok(()) => {}
                Err(error @ LockError::NoPermission { .. }) => {
                    act.record.off = true;
                    tracing::warn!(%error, "no permission for lockman_client:* keys: this manager's client record is skipped (locking is not affected)");
                }
                Err(error) => tracing::debug!(%error, "client record not written"),
            }
        })))
    }

    /// The record as of `now`: who this manager is, how many holds and waited names there
    /// are, the oldest hold per name (the oldest first) and the most waited names.
    fn client_record(&self, now: Instant) -> ClientRecord {
        let mut oldest: FxHashMap<&str, (&Tracked, &RenewKey)> = FxHashMap::default();
        for (key, t) in &self.renewals.tracked {
            let e = oldest.entry(&*key.name).or_insert((t, key));
            if t.granted < e.0.granted {
                *e = (t, key);
            }
        }
        let mut holds: Vec<_> = oldest.into_iter().collect();
        holds.sort_unstable_by_key(|(_, (t, _))| t.granted);
        let holds_total = holds.len();
        let holds = holds
            .into_iter()
            .take(MAX_LISTED)
            .map(|(name, (t, key))| {
                let members = match key.what {
                    Renewal::Lock(LockKind::Group) => {
                        self.commands.groups().members(&key.holder).ok()
                    }
                    _ => None,
                };
                RecordedHold {
                    name: name.to_owned(),
                    kind: match key.what {
                        Renewal::Lock(kind) => kind.label(),
                        Renewal::Permits => "permits",
                    }
                    .to_owned(),
                    holder: key.holder.to_string(),
                    held_ms: millis(now.saturating_duration_since(t.granted)),
                    members_total: members.as_ref().map_or(0, |m| m.len()),
                    members: members.map_or_else(Vec::new, |m| RecordedHold::listed(&m)),
                }
            })
            .collect();
        let (waits, waits_total) = self.board.waiting(MAX_LISTED);
        let waits = waits
            .into_iter()
            .map(|w| RecordedWait {
                name: w.name.to_string(),
                waiters: w.waiters,
                waited_ms: millis(now.saturating_duration_since(w.since)),
            })
            .collect();
        let deadlocks = self
            .detector
            .recent_cycles(now)
            .into_iter()
            .map(|(ago, cycle)| (millis(ago), cycle))
            .collect();
        ClientRecord {
            holds_total: Some(holds_total),
            holds,
            waits_total: Some(waits_total),
            waits,
            deadlocks,
            ..self.record.identity.clone()
        }
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// This machine's name: `$HOSTNAME`, else the kernel's (Linux), else `/etc/hostname`.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}
