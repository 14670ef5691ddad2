//! Client records (docs/protocol.md, "Client records"): each manager's hash saying who it is
//! (service, host, pid, version) and which names it has held long or waits on, refreshed by its
//! Watchdog; and the read of every live one, for `lockman inspect`, `ls` and `top`. Redisson
//! never reads these keys; a user without permission for them still locks.
//!
//! Every record and the index share the hash tag `{lockman}`: on a cluster they live in one
//! slot, so one call on one master finds every client without scanning the keyspace.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use super::commands::Commands;
use super::{millis, unexpected};
use crate::connections::command::{Replicas, ScriptCall};
use crate::error::LockError;

static RECORD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("clients/record.lua")));
static READ: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("clients/read.lua")));
static SERVICE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("clients/service.lua")));
static FORGET: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("clients/forget.lua")));

/// The scripts of a manager's own record, loaded at start with the others: the first lock's
/// acquire waits for the record's first write (`FirstUse`), which is then one round trip, not
/// a NOSCRIPT miss, a load and the call again (three).
pub(super) fn record_scripts() -> [&'static Script; 2] {
    [&RECORD, &FORGET]
}

/// The index of live clients: a sorted set of client ids scored by when their record expires
/// (epoch ms, the server's clock).
pub(crate) const CLIENT_INDEX: &str = "lockman_client:{lockman}";

/// The key of client `id`'s record.
pub(crate) fn client_key(id: &str) -> String {
    format!("{CLIENT_INDEX}:{id}")
}

/// One live record as read: the client id, and what its record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RawRecord {
    pub id: String,
    pub record: ClientRecord,
}

/// What a client record says (docs/protocol.md, "Client records"): the hash's fields as types.
/// [`encode`](Self::encode) is what a manager's watchdog writes, [`decode`](Self::decode) what
/// [`LockManager::clients`](crate::LockManager::clients) reads; this is the one place that
/// knows how the fields are spelled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClientRecord {
    /// `Config::client_name`.
    pub service: String,
    pub host: String,
    pub pid: Option<u32>,
    /// lockman's version.
    pub version: String,
    /// When the manager started: epoch ms, by its own clock.
    pub started: Option<u64>,
    /// The server's clock at the record's last write (epoch ms): `record.lua` sets it, so
    /// [`encode`](Self::encode) leaves it out; the ages below are as of then.
    pub seen: Option<u64>,
    /// How many holds the manager has that are old enough to be renewed.
    pub holds_total: Option<usize>,
    /// The oldest of them (one per name, at most [`MAX_LISTED`] written).
    pub holds: Vec<RecordedHold>,
    /// How many names its callers wait on.
    pub waits_total: Option<usize>,
    /// The most waited of them (at most [`MAX_LISTED`] written).
    pub waits: Vec<RecordedWait>,
    /// The cycles of waits it broke or reported lately (`deadlock:<n>` = `<ms ago> <cycle>`),
    /// newest first.
    pub deadlocks: Vec<(u64, String)>,
}

/// One `hold:<name>` field: `<held ms> <kind> <holder>`, and for a group lock
/// ` <members total>:<member>:<member>…` after it (its first members, up to
/// [`LISTED_MEMBERS`] and [`LISTED_MEMBER_BYTES`]; a member has no `:`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RecordedHold {
    pub name: String,
    /// A [`LockKind::label`](super::LockKind::label), or `permits` (a permit semaphore's grant,
    /// whose holder is then its permit ids).
    pub kind: String,
    pub holder: String,
    /// How long it had been held at `seen`.
    pub held_ms: u64,
    /// A group lock's member count (0 for other kinds) and its first members, as listed.
    pub members_total: usize,
    pub members: Vec<String>,
}

/// The most members of a group hold a record lists, and the most bytes of their names.
pub(crate) const LISTED_MEMBERS: usize = 3;
pub(crate) const LISTED_MEMBER_BYTES: usize = 96;

impl RecordedHold {
    /// The members listed of a group of `members`: the first ones, within the bounds.
    pub(crate) fn listed(members: &[String]) -> Vec<String> {
        let mut room = LISTED_MEMBER_BYTES;
        members
            .iter()
            .take(LISTED_MEMBERS)
            .take_while(|m| match room.checked_sub(m.len()) {
                Some(left) => {
                    room = left;
                    true
                }
                None => false,
            })
            .cloned()
            .collect()
    }
}

/// One `wait:<name>` field: `<waiters> <waited ms>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RecordedWait {
    pub name: String,
    pub waiters: u32,
    /// How long the longest of them had waited at `seen`.
    pub waited_ms: u64,
}

/// The most holds, and the most waited names, one record lists (the longest held, the most
/// waited on); the record counts them all.
pub(crate) const MAX_LISTED: usize = 1000;

/// The longest service name read from another client's record for a span (`clients/service.lua`).
const MAX_SERVICE: usize = 256;

impl ClientRecord {
    /// The hash's fields, in the order written: who the manager is, the counts, then each hold
    /// and each waited name (`seen` is the script's).
    pub(crate) fn encode(&self) -> Vec<(String, String)> {
        let mut fields = Vec::with_capacity(7 + self.holds.len() + self.waits.len());
        let mut put = |field: &str, value: String| fields.push((field.to_owned(), value));
        put("service", self.service.clone());
        put("host", self.host.clone());
        if let Some(pid) = self.pid {
            put("pid", pid.to_string());
        }
        put("version", self.version.clone());
        if let Some(started) = self.started {
            put("started", started.to_string());
        }
        if let Some(total) = self.holds_total {
            put("holds", total.to_string());
        }
        if let Some(total) = self.waits_total {
            put("waits", total.to_string());
        }
        for h in &self.holds {
            let mut value = format!("{} {} {}", h.held_ms, h.kind, h.holder);
            if h.members_total > 0 {
                value += &format!(" {}", h.members_total);
                for m in &h.members {
                    value.push(':');
                    value += m;
                }
            }
            fields.push((format!("hold:{}", h.name), value));
        }
        for w in &self.waits {
            let value = format!("{} {}", w.waiters, w.waited_ms);
            fields.push((format!("wait:{}", w.name), value));
        }
        for (n, (ago_ms, cycle)) in self.deadlocks.iter().enumerate() {
            fields.push((format!("deadlock:{n}"), format!("{ago_ms} {cycle}")));
        }
        fields
    }

    /// A record from its hash's fields, as read. Fields it does not know (a newer lockman's)
    /// and malformed hold or wait fields are skipped; the lists keep the hash's order.
    pub(crate) fn decode(fields: &[(String, String)]) -> Self {
        let mut record = Self::default();
        for (field, value) in fields {
            if let Some(name) = field.strip_prefix("hold:") {
                let mut parts = value.splitn(3, ' ');
                let held = parts.next().and_then(|v| v.parse().ok());
                let (Some(held_ms), Some(kind)) = (held, parts.next()) else {
                    continue;
                };
                let mut holder = parts.next().unwrap_or_default();
                let (mut members_total, mut members) = (0, Vec::new());
                if kind == "group"
                    && let Some((h, listed)) = holder.split_once(' ')
                {
                    let mut listed = listed.split(':');
                    members_total = listed.next().and_then(|n| n.parse().ok()).unwrap_or(0);
                    members = listed
                        .take(LISTED_MEMBERS)
                        .map(|m| m.chars().take(LISTED_MEMBER_BYTES).collect())
                        .collect();
                    holder = h;
                }
                record.holds.push(RecordedHold {
                    name: name.to_owned(),
                    kind: kind.to_owned(),
                    holder: holder.to_owned(),
                    held_ms,
                    members_total,
                    members,
                });
                continue;
            }
            if let Some(name) = field.strip_prefix("wait:") {
                let mut parts = value.split(' ');
                let waiters = parts.next().and_then(|v| v.parse().ok());
                let waited = parts.next().and_then(|v| v.parse().ok());
                if let (Some(waiters), Some(waited_ms)) = (waiters, waited) {
                    record.waits.push(RecordedWait {
                        name: name.to_owned(),
                        waiters,
                        waited_ms,
                    });
                }
                continue;
            }
            if field.starts_with("deadlock:") {
                if let Some((ago, cycle)) = value.split_once(' ')
                    && let Ok(ago_ms) = ago.parse()
                {
                    record.deadlocks.push((ago_ms, cycle.to_owned()));
                }
                continue;
            }
            match field.as_str() {
                "service" => record.service.clone_from(value),
                "host" => record.host.clone_from(value),
                "pid" => record.pid = value.parse().ok(),
                "version" => record.version.clone_from(value),
                "started" => record.started = value.parse().ok(),
                "seen" => record.seen = value.parse().ok(),
                "holds" => record.holds_total = value.parse().ok(),
                "waits" => record.waits_total = value.parse().ok(),
                _ => {}
            }
        }
        record
    }
}

impl Commands {
    /// Writes this manager's record (`clients/record.lua`), to expire after `ttl`.
    pub(crate) async fn write_client_record(
        &self,
        id: &str,
        ttl: Duration,
        record: &ClientRecord,
    ) -> Result<(), LockError> {
        let key = client_key(id);
        let fields = record.encode();
        let bytes: usize = fields.iter().map(|(f, v)| f.len() + v.len() + 8).sum();
        let mut call = ScriptCall::new(&RECORD, 2, 2 + 2 * fields.len(), 2 * key.len() + bytes);
        call.key(&key).key(CLIENT_INDEX).arg(millis(ttl)).arg(id);
        for (f, v) in &fields {
            call.arg(f).arg(v);
        }
        self.conn()
            .eval("client record", &key, &call, Replicas::Skip)
            .await?;
        Ok(())
    }

    /// Deletes this manager's record (`clients/forget.lua`).
    pub(crate) async fn forget_client_record(&self, id: &str) -> Result<(), LockError> {
        let key = client_key(id);
        let mut call = ScriptCall::new(&FORGET, 2, 1, 2 * key.len());
        call.key(&key).key(CLIENT_INDEX).arg(id);
        self.conn()
            .eval("client record", &key, &call, Replicas::Skip)
            .await?;
        Ok(())
    }

    /// The service name in client `id`'s record (`clients/service.lua`), if it has one.
    pub(crate) async fn client_service(&self, id: &str) -> Result<Option<String>, LockError> {
        let key = client_key(id);
        let mut call = ScriptCall::new(&SERVICE, 1, 1, key.len() + 8);
        call.key(&key).arg(MAX_SERVICE);
        let reply = self
            .conn()
            .eval("read clients", &key, &call, Replicas::Skip)
            .await?;
        Ok(lossy(&reply.value))
    }

    /// Every live record (`clients/read.lua`) and the server's time (epoch ms). Records are
    /// written by anyone who may write lockman's keys: one over the bounds ([`READ_BOUNDS`]) is
    /// not read, one that does not decode is skipped, and text that is not UTF-8 is read
    /// lossily; what was skipped is said in one warning, never failing the read.
    pub(crate) async fn read_client_records(&self) -> Result<(u64, Vec<RawRecord>), LockError> {
        let b = READ_BOUNDS;
        let mut call = ScriptCall::new(&READ, 1, 7, 2 * CLIENT_INDEX.len() + 60);
        call.key(CLIENT_INDEX)
            .arg(format!("{CLIENT_INDEX}:"))
            .arg(b.records)
            .arg(b.fields)
            .arg(b.bytes)
            .arg(b.total_bytes)
            .arg(b.index_members)
            .arg(b.index_bytes);
        let reply = self
            .conn()
            .eval("read clients", CLIENT_INDEX, &call, Replicas::Skip);
        let (now, records, skipped) = decode_records(reply.await?.value)?;
        if skipped > 0 {
            skipped_warning(skipped);
        }
        Ok((now, records))
    }
}

/// The bounds of one read of every record (`clients/read.lua`): a record over them is skipped.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadBounds {
    /// The most live clients read (index members).
    pub records: usize,
    /// The most fields of one record: a manager writes up to [`MAX_LISTED`] holds and as many
    /// waits, and a dozen more.
    pub fields: usize,
    /// The most bytes of one record (as `MEMORY USAGE` counts them).
    pub bytes: usize,
    /// The most bytes of every record read together.
    pub total_bytes: usize,
    /// The most members, and bytes, of the index: one over them (forged) is not read at all.
    pub index_members: usize,
    pub index_bytes: usize,
}

pub(crate) const READ_BOUNDS: ReadBounds = ReadBounds {
    records: 10_000,
    fields: 2 * MAX_LISTED + 32,
    bytes: 1 << 20,
    total_bytes: 32 << 20,
    index_members: 20_000,
    index_bytes: 8 << 20,
};

/// One warning per process for records skipped (`lockman top` reads every second); later ones
/// at debug.
fn skipped_warning(skipped: usize) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::debug!(
            skipped,
            "client records skipped: over the read bounds or malformed"
        );
    } else {
        tracing::warn!(
            skipped,
            "client records skipped: over the read bounds or malformed (forged by another client?); the others are read"
        );
    }
}

/// Text from Redis, as UTF-8: bytes that are not are replaced (U+FFFD), never refused.
fn lossy(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `read.lua`'s reply: the server's time, the records that decode, and how many were skipped
/// (by the script, or here: an id or a field list that is not text).
fn decode_records(reply: Value) -> Result<(u64, Vec<RawRecord>, usize), LockError> {
    let Value::Array(items) = reply else {
        return Err(unexpected("read clients", reply));
    };
    let (now, skipped) = match items.get(..2) {
        Some([Value::Int(now), Value::Int(skipped)]) => (*now, *skipped),
        _ => return Err(unexpected("read clients", Value::Array(items))),
    };
    let mut skipped = usize::try_from(skipped).unwrap_or(0);
    let mut records = Vec::with_capacity(items.len().saturating_sub(2) / 2);
    for pair in items[2..].chunks(2) {
        let [id, Value::Array(flat)] = pair else {
            skipped += 1;
            continue;
        };
        let (Some(id), Some(flat)) = (
            lossy(id),
            flat.iter().map(lossy).collect::<Option<Vec<_>>>(),
        ) else {
            skipped += 1;
            continue;
        };
        let fields: Vec<(String, String)> = flat
            .chunks_exact(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect();
        let record = ClientRecord::decode(&fields);
        records.push(RawRecord { id, record });
    }
    Ok((u64::try_from(now).unwrap_or(0), records, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ClientRecord {
        ClientRecord {
            service: "billing".into(),
            host: "web1".into(),
            pid: Some(42),
            version: "0.1.0".into(),
            started: Some(1000),
            seen: None,
            holds_total: Some(3),
            holds: vec![
                RecordedHold {
                    name: "orders:{7}".into(),
                    kind: "fair".into(),
                    holder: "c1:2".into(),
                    held_ms: 9000,
                    members_total: 0,
                    members: Vec::new(),
                },
                RecordedHold {
                    // A group's members, spaces kept.
                    name: "g".into(),
                    kind: "group".into(),
                    holder: "c1:3".into(),
                    held_ms: 800,
                    members_total: 1000,
                    members: vec!["m 1".into(), "m2".into(), "m3".into()],
                },
                RecordedHold {
                    // A name with spaces and colons, and permit ids as holder.
                    name: "a b:c".into(),
                    kind: "permits".into(),
                    holder: "00ff,a1b2".into(),
                    held_ms: 500,
                    members_total: 0,
                    members: Vec::new(),
                },
            ],
            waits_total: Some(1),
            waits: vec![RecordedWait {
                name: "hot name".into(),
                waiters: 3,
                waited_ms: 200,
            }],
            deadlocks: vec![(
                1500,
                "task 1 of a waits for lock \"x y\" held by task 2 of b".into(),
            )],
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let written = record();
        let fields = written.encode();
        assert_eq!(ClientRecord::decode(&fields), written);
        // The spelling other versions read (docs/protocol.md), field by field.
        let get = |f: &str| fields.iter().find(|(k, _)| k == f).map(|(_, v)| v.as_str());
        assert_eq!(get("hold:orders:{7}"), Some("9000 fair c1:2"));
        assert_eq!(get("hold:a b:c"), Some("500 permits 00ff,a1b2"));
        assert_eq!(get("wait:hot name"), Some("3 200"));
        assert_eq!(
            (get("holds"), get("waits"), get("pid")),
            (Some("3"), Some("1"), Some("42"))
        );
        assert_eq!(get("seen"), None, "seen is the script's to write");
    }

    #[test]
    fn records_decode_lossily_and_a_malformed_one_is_skipped_not_fatal() {
        let bulk = |b: &[u8]| Value::BulkString(b.to_vec());
        let reply = Value::Array(vec![
            Value::Int(5_000),
            Value::Int(2),
            bulk(b"id-1"),
            Value::Array(vec![
                bulk(b"host"),
                bulk(b"\xff\xfeab"),
                bulk(b"service"),
                bulk(b"s"),
            ]),
            // Not a field list: skipped and counted with the script's two.
            bulk(b"id-2"),
            Value::Int(7),
            bulk(b"id-\xc3"),
            Value::Array(vec![bulk(b"pid"), bulk(b"42")]),
        ]);
        let (now, records, skipped) = decode_records(reply).unwrap();
        assert_eq!((now, skipped), (5_000, 3));
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].record.host, "\u{fffd}\u{fffd}ab");
        assert_eq!(records[0].record.service, "s");
        assert_eq!(
            (records[1].id.as_str(), records[1].record.pid),
            ("id-\u{fffd}", Some(42))
        );
        // Not the script's shape at all: refused, typed, and quoted short.
        let huge = Value::Array(vec![bulk(&vec![b'x'; 100_000])]);
        let Err(LockError::UnexpectedReply { op, detail }) = decode_records(huge) else {
            panic!("refused");
        };
        assert_eq!(op, "read clients");
        assert!(detail.len() < 400, "{}", detail.len());
    }

    #[test]
    fn a_record_skips_what_it_cannot_read() {
        let f = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let read = ClientRecord::decode(&[
            f("seen", "10000"),
            f("hold:x", "not-a-number lock c1:1"),
            f("hold:y", "12"),
            f("wait:z", "3"),
            f("future_field", "1"),
            f("hold:ok", "7 lock"),
        ]);
        assert_eq!(read.seen, Some(10_000));
        assert_eq!(read.waits, vec![]);
        assert_eq!(read.holds.len(), 1);
        assert_eq!(
            (read.holds[0].held_ms, read.holds[0].holder.as_str()),
            (7, "")
        );
    }
}
