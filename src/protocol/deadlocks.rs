//! Long waits, published for deadlock detection across processes (docs/protocol.md, "Waits for
//! deadlock detection"): each manager whose callers have waited past the threshold keeps one
//! hash, `lockman_waits:{lockman}:<client id>`, with one field per such owner: what it waits
//! for, and what it holds (each hold's name and holder field). A manager following a wait reads
//! the lock's holder fields, whose first part is the holding client's id, and that client's
//! hash tells which of its owners holds it and what that owner waits for.
//!
//! The hashes share the records' hash tag `{lockman}`: on a cluster they live in one slot.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Script, Value};

use super::commands::Commands;
use super::{millis, unexpected};
use crate::connections::command::{Replicas, ScriptCall};
use crate::error::{LockError, Owner};

static PUBLISH: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("deadlocks/publish.lua")));
static READ: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("deadlocks/read.lua")));
static HOLDERS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("deadlocks/holders.lua")));

/// The most fields of another client's waits hash read: one per owner of it whose wait has
/// lasted past the threshold. A hash with more is not read (`read.lua`).
pub(crate) const MAX_WAITS_FIELDS: usize = 1000;
/// The most bytes (as `MEMORY USAGE` counts them) of a waits hash read.
pub(crate) const MAX_WAITS_BYTES: usize = 1 << 20;
/// The most fields, and bytes, of a lock's hash the probe reads for its holders
/// (`holders.lua`): a read-write lock has a field per reader.
pub(crate) const MAX_HOLDER_FIELDS: usize = 4096;
pub(crate) const MAX_HOLDER_BYTES: usize = 1 << 20;
/// The same for a group lock's hash: three fields per member held, so that two holders of a
/// group of [`MAX_GROUP_MEMBERS`](super::MAX_GROUP_MEMBERS) members are read.
pub(crate) const MAX_GROUP_HOLDER_FIELDS: usize = 6 * super::MAX_GROUP_MEMBERS + 16;
pub(crate) const MAX_GROUP_HOLDER_BYTES: usize = 8 << 20;
/// The longest service name kept from another client's waits hash (longer ones are cut).
const MAX_SERVICE: usize = 128;
/// The longest place (`file:line:column`) and scope label written to, and kept from, a waits
/// hash (longer ones are cut): a wait's entry stays small.
const MAX_PLACE: usize = 256;
const MAX_LABEL: usize = 128;
/// The holder parts that mark a pair after the holds as the wait's place or label, not a
/// hold: no holder field has this shape (`holder_of`), so a reader of an older version, which
/// takes the pair for a hold, never follows it.
const PLACE_TAG: &str = "@place";
const LABEL_TAG: &str = "@label";
/// The holder part that marks a pair as a group lock wait's member (its first part), as
/// [`PLACE_TAG`] does a place.
const MEMBER_TAG: &str = "@member";
/// The most bytes of member names a group wait's entry carries (members past them are left
/// out: a cycle through one of those is not found across processes).
const MAX_MEMBER_BYTES: usize = 64 * 1024;

/// The kinds a wait may have, as `publish.lua` writes them: an entry of another kind is no
/// entry this version reads.
const KINDS: [super::LockKind; 9] = [
    super::LockKind::Reentrant,
    super::LockKind::Fenced,
    super::LockKind::Read,
    super::LockKind::Write,
    super::LockKind::Fair,
    super::LockKind::NonReentrant,
    super::LockKind::NonReentrantFair,
    super::LockKind::Spin,
    super::LockKind::Group,
];

/// The hash of client `id`'s long waits.
pub(crate) fn waits_key(id: &str) -> String {
    format!("lockman_waits:{{lockman}}:{id}")
}

/// One owner's long wait, as published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Blocked {
    pub owner: Owner,
    /// Its manager's service name.
    pub service: String,
    /// What it waits for: the lock's key, its kind's label and the wait's holder field.
    pub name: String,
    pub kind: String,
    pub holder: String,
    /// When the wait began, by the server's clock (epoch ms): set by `publish.lua`.
    pub since_ms: u64,
    /// What the owner holds: each hold's lock key and holder field.
    pub holds: Vec<(String, String)>,
    /// A group lock wait's members, sorted (the fields it waits for): empty for other kinds;
    /// written up to [`MAX_MEMBER_BYTES`] of names.
    pub members: Arc<[String]>,
    /// Where its code asked for the wait (`file:line:column`), and its scope's label: for the
    /// messages of other processes. Cut to [`MAX_PLACE`] and [`MAX_LABEL`] bytes.
    pub place: Option<String>,
    pub label: Option<String>,
}

impl Blocked {
    /// The field and value written (the value without the `since` line `publish.lua` adds).
    fn encode(&self) -> (String, String) {
        let mut value = String::new();
        for part in [&self.service, &self.kind, &self.name, &self.holder] {
            netstring(&mut value, part);
        }
        for (name, holder) in &self.holds {
            netstring(&mut value, name);
            netstring(&mut value, holder);
        }
        // After the holds, as pairs an older reader takes for holds it never follows.
        let mut room = MAX_MEMBER_BYTES;
        for member in self.members.iter() {
            room = match room.checked_sub(member.len()) {
                Some(left) => left,
                None => break,
            };
            netstring(&mut value, member);
            netstring(&mut value, MEMBER_TAG);
        }
        for (text, tag, most) in [
            (&self.place, PLACE_TAG, MAX_PLACE),
            (&self.label, LABEL_TAG, MAX_LABEL),
        ] {
            if let Some(text) = text {
                netstring(&mut value, &cut(text.clone(), most));
                netstring(&mut value, tag);
            }
        }
        (owner_field(self.owner), value)
    }

    /// A field and value as read; `None` for one this version cannot read (an unknown kind
    /// among them). Another process wrote it: a service name longer than [`MAX_SERVICE`]
    /// bytes is cut there.
    fn decode(field: &str, value: &str) -> Option<Self> {
        let owner = parse_owner(field)?;
        let (since, mut rest) = value.split_once('\n')?;
        let mut parts = Vec::new();
        while !rest.is_empty() {
            let (part, after) = take_netstring(rest)?;
            parts.push(part.to_owned());
            rest = after;
        }
        if parts.len() < 4 || parts.len() % 2 != 0 {
            return None;
        }
        let (mut holds, mut place, mut label) = (Vec::new(), None, None);
        let mut members = Vec::new();
        for pair in parts[4..].chunks_exact(2) {
            match pair[1].as_str() {
                PLACE_TAG => place = Some(cut(pair[0].clone(), MAX_PLACE)),
                LABEL_TAG => label = Some(cut(pair[0].clone(), MAX_LABEL)),
                MEMBER_TAG => members.push(pair[0].clone()),
                _ => holds.push((pair[0].clone(), pair[1].clone())),
            }
        }
        // Sorted here: the graph's rule looks members up by halves, whoever wrote them.
        members.sort_unstable();
        let mut parts = parts.into_iter();
        let service = cut(parts.next()?, MAX_SERVICE);
        let kind = parts.next()?;
        if !KINDS.iter().any(|k| k.label() == kind) {
            return None;
        }
        Some(Self {
            owner,
            service,
            kind,
            name: parts.next()?,
            holder: parts.next()?,
            since_ms: since.parse().ok()?,
            holds,
            members: members.into(),
            place,
            label,
        })
    }
}

/// `text` cut to at most `most` bytes (at a character boundary), marked with `…` when cut.
fn cut(mut text: String, most: usize) -> String {
    if text.len() > most {
        let mut end = most;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

fn owner_field(owner: Owner) -> String {
    match owner {
        Owner::Task(n) => format!("task:{n}"),
        Owner::Thread(n) => format!("thread:{n}"),
        Owner::Scope(n) => format!("scope:{n}"),
    }
}

fn parse_owner(field: &str) -> Option<Owner> {
    let (kind, n) = field.split_once(':')?;
    let n = n.parse().ok()?;
    match kind {
        "task" => Some(Owner::Task(n)),
        "thread" => Some(Owner::Thread(n)),
        "scope" => Some(Owner::Scope(n)),
        _ => None,
    }
}

/// `<bytes>:<text>,`: any text, newlines and commas included.
fn netstring(out: &mut String, text: &str) {
    use std::fmt::Write;
    let _ = write!(out, "{}:{text},", text.len());
}

fn take_netstring(s: &str) -> Option<(&str, &str)> {
    let (len, rest) = s.split_once(':')?;
    let len: usize = len.parse().ok()?;
    let text = rest.get(..len)?;
    let rest = rest.get(len..)?.strip_prefix(',')?;
    Some((text, rest))
}

/// The client id of a holder field (`<client id>:<n>`, a read-write lock's writer
/// `<client id>:<n>:write`) and the holder it names (without `:write`); `None` for a field that is
/// no holder (`mode`) or not lockman's or Redisson's shape.
pub(crate) fn holder_of(field: &str) -> Option<(&str, &str)> {
    let holder = field.strip_suffix(":write").unwrap_or(field);
    let (client, n) = holder.rsplit_once(':')?;
    (n.parse::<u64>().is_ok() && uuid::Uuid::parse_str(client).is_ok()).then_some((client, holder))
}

/// The member, client id and holder of a group hash's field `<member>:<holder>:expire_time`
/// (one per member a holder holds: members contain no `:`); `None` for any other field.
pub(crate) fn group_holder_of(field: &str) -> Option<(&str, &str, &str)> {
    let (member, holder) = field.strip_suffix(":expire_time")?.split_once(':')?;
    let (client, holder) = holder_of(holder)?;
    Some((member, client, holder))
}

impl Commands {
    /// Replaces client `id`'s long waits with `blocked` (each with how long it has waited), to
    /// expire after `ttl`; none deletes them. Returns the server's time (epoch ms). Within the
    /// bounds other clients read ([`MAX_WAITS_FIELDS`], half of [`MAX_WAITS_BYTES`] for the
    /// hash's own overhead): the longest waits first, the rest left out, so that the hash
    /// stays readable.
    pub(crate) async fn publish_blocked(
        &self,
        id: &str,
        ttl: Duration,
        blocked: &[(Blocked, Duration)],
    ) -> Result<u64, LockError> {
        let key = waits_key(id);
        let entries = publishable(blocked);
        let bytes: usize = entries
            .iter()
            .map(|(f, w, v)| f.len() + w.len() + v.len() + 12)
            .sum();
        let mut call = ScriptCall::new(&PUBLISH, 1, 1 + 3 * entries.len(), key.len() + bytes);
        call.key(&key).arg(millis(ttl));
        for (field, waited, value) in &entries {
            call.arg(field).arg(waited).arg(value);
        }
        let reply = self
            .conn()
            .eval("publish waits", &key, &call, Replicas::Skip)
            .await?
            .value;
        match reply {
            redis::Value::Int(now) => Ok(u64::try_from(now).unwrap_or(0)),
            other => Err(unexpected("publish waits", other)),
        }
    }

    /// Client `id`'s long waits, as it last published them (with `ttl`, which dates its last
    /// write); `None` for a hash over [`MAX_WAITS_FIELDS`] or [`MAX_WAITS_BYTES`], which is
    /// not read.
    pub(crate) async fn read_blocked(
        &self,
        id: &str,
        ttl: Duration,
    ) -> Result<Option<Published>, LockError> {
        let key = waits_key(id);
        let mut call = ScriptCall::new(&READ, 1, 3, key.len() + 24);
        call.key(&key)
            .arg(millis(ttl))
            .arg(MAX_WAITS_FIELDS)
            .arg(MAX_WAITS_BYTES);
        let reply = self
            .conn()
            .eval("read waits", &key, &call, Replicas::Skip)
            .await?
            .value;
        decode_published(reply)
    }

    /// The fields of lock `key`'s hash (`holders.lua`): its holder fields, and `mode`; `None`
    /// for a hash over [`MAX_HOLDER_FIELDS`] or [`MAX_HOLDER_BYTES`], which is not read. A
    /// group lock's hash (`group`) has three fields per member held: it is read up to
    /// [`MAX_GROUP_HOLDER_FIELDS`] and [`MAX_GROUP_HOLDER_BYTES`].
    pub(crate) async fn lock_fields(
        &self,
        key: &str,
        group: bool,
    ) -> Result<Option<Vec<String>>, LockError> {
        let mut call = ScriptCall::new(&HOLDERS, 1, 2, key.len() + 16);
        let (fields, bytes) = if group {
            (MAX_GROUP_HOLDER_FIELDS, MAX_GROUP_HOLDER_BYTES)
        } else {
            (MAX_HOLDER_FIELDS, MAX_HOLDER_BYTES)
        };
        call.key(key).arg(fields).arg(bytes);
        let reply = self
            .conn()
            .eval("read holders", key, &call, Replicas::Skip)
            .await?
            .value;
        match reply {
            Value::Array(fields) => Ok(Some(
                fields
                    .iter()
                    .filter_map(|f| match f {
                        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
                        _ => None,
                    })
                    .collect(),
            )),
            ref v if oversized(v) => Ok(None),
            other => Err(unexpected("read holders", other)),
        }
    }
}

/// A bulk string that is UTF-8.
fn text(v: &Value) -> Option<&str> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok(),
        _ => None,
    }
}

/// Whether a reply is the `OVERSIZED` status of `read.lua` or `holders.lua`.
fn oversized(reply: &Value) -> bool {
    matches!(reply, Value::SimpleString(s) if s == "OVERSIZED")
}

/// The field, waited ms and value of each of `blocked` that `publish_blocked` writes: the
/// longest waits first, at most [`MAX_WAITS_FIELDS`] of them and half of [`MAX_WAITS_BYTES`].
fn publishable(blocked: &[(Blocked, Duration)]) -> Vec<(String, String, String)> {
    let mut longest: Vec<&(Blocked, Duration)> = blocked.iter().collect();
    longest.sort_by_key(|(_, waited)| std::cmp::Reverse(*waited));
    let mut room = MAX_WAITS_BYTES / 2;
    longest
        .into_iter()
        .map(|(b, waited)| {
            let (field, value) = b.encode();
            (field, millis(*waited).to_string(), value)
        })
        .take_while(|(f, w, v)| {
            let size = f.len() + w.len() + v.len() + 16;
            room = room.saturating_sub(size);
            room > 0
        })
        .take(MAX_WAITS_FIELDS)
        .collect()
}

/// What a manager last published: when, and its long waits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Published {
    /// When it was last written, by the server's clock (epoch ms); 0 for none or unknown.
    pub written_ms: u64,
    pub waits: Vec<Blocked>,
}

/// `read.lua`'s reply: nothing, or the time of the last write and the fields and values
/// (`None`: the hash was over the bounds). A field or value that is not UTF-8, or not an entry
/// this version reads, is skipped.
fn decode_published(reply: Value) -> Result<Option<Published>, LockError> {
    if oversized(&reply) {
        return Ok(None);
    }
    let Value::Array(items) = reply else {
        return Err(unexpected("read waits", reply));
    };
    let Some((written, flat)) = items.split_first() else {
        return Ok(Some(Published::default()));
    };
    let Value::Int(written) = written else {
        return Err(unexpected("read waits", Value::Array(items)));
    };
    Ok(Some(Published {
        written_ms: u64::try_from(*written).unwrap_or(0),
        waits: flat
            .chunks_exact(2)
            .filter_map(|p| Blocked::decode(text(&p[0])?, text(&p[1])?))
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_as_written_whatever_its_names_hold() {
        let blocked = Blocked {
            owner: Owner::Task(42),
            service: "orders".into(),
            name: "a,b:\n{c}".into(),
            kind: "write".into(),
            holder: "00000000-0000-0000-0000-000000000001:7".into(),
            since_ms: 0,
            holds: vec![("x".into(), "h:1".into()), ("".into(), "h:2".into())],
            members: Arc::default(),
            place: Some("src/main.rs:12:5".into()),
            label: Some("check\nout".into()),
        };
        let (field, value) = blocked.encode();
        let read = Blocked::decode(&field, &format!("1234\n{value}")).unwrap();
        assert_eq!(
            read,
            Blocked {
                since_ms: 1234,
                ..blocked
            }
        );
        assert_eq!(Blocked::decode("task:x", "1\n"), None);
        assert_eq!(Blocked::decode("task:1", "1\n3:ab,"), None);
        // Another process's text: an unknown kind is no entry; a long service name is cut.
        let forged = |service: &str, kind: &str| {
            let mut value = String::from("5\n");
            for part in [service, kind, "x", "h:1"] {
                netstring(&mut value, part);
            }
            Blocked::decode("task:1", &value)
        };
        assert_eq!(forged("s", "lock\x1b[31m"), None);
        assert_eq!(forged("s", "write").unwrap().kind, "write");
        let long = forged(&"é".repeat(1000), "fair").unwrap();
        assert!(
            long.service.len() <= MAX_SERVICE + 3,
            "{}",
            long.service.len()
        );
        assert!(long.service.ends_with('…'));
        // A place and a label are cut too, on write and on read; their tags are no holder
        // field, so a reader that takes them for holds never follows them.
        let mut value = String::from("5\n");
        for part in ["s", "lock", "x", "h:1", &"p".repeat(10_000), PLACE_TAG] {
            netstring(&mut value, part);
        }
        netstring(&mut value, &"é".repeat(1000));
        netstring(&mut value, LABEL_TAG);
        let read = Blocked::decode("task:1", &value).unwrap();
        assert!(read.holds.is_empty(), "{:?}", read.holds);
        assert_eq!(read.place.unwrap().len(), MAX_PLACE + '…'.len_utf8());
        assert!(read.label.unwrap().len() <= MAX_LABEL + 3);
        let (_, written) = Blocked {
            place: Some("q".repeat(10_000)),
            ..Blocked::decode("task:1", "1\n1:s,4:lock,1:x,3:h:1,").unwrap()
        }
        .encode();
        assert!(written.len() < 400, "{}", written.len());
        assert_eq!(holder_of(PLACE_TAG), None);
        assert_eq!(holder_of(LABEL_TAG), None);
        assert_eq!(holder_of(MEMBER_TAG), None);
        // A group wait's members: read back sorted, whatever order they were written in; no
        // more than MAX_MEMBER_BYTES of names written.
        let group = |members: Vec<String>| Blocked {
            kind: "group".into(),
            members: members.into(),
            ..Blocked::decode("task:1", "1\n1:s,4:lock,1:x,3:h:1,").unwrap()
        };
        let (field, value) = group(vec!["m2".into(), "m1".into()]).encode();
        let read = Blocked::decode(&field, &format!("1\n{value}")).unwrap();
        assert_eq!(&read.members[..], ["m1", "m2"]);
        assert!(read.holds.is_empty());
        let many: Vec<String> = (0..10_000).map(|i| format!("member{i:05}")).collect();
        let (field, value) = group(many).encode();
        let read = Blocked::decode(&field, &format!("1\n{value}")).unwrap();
        assert_eq!(read.members.len(), MAX_MEMBER_BYTES / "member00000".len());
        // A group hash's fields: each member's holder from its expiry field, nothing else.
        let holder = "5f0c7a4e-2c1b-4f3e-9d7a-0a1b2c3d4e5f:7";
        let client = "5f0c7a4e-2c1b-4f3e-9d7a-0a1b2c3d4e5f";
        assert_eq!(
            group_holder_of(&format!("m1:{holder}:expire_time")),
            Some(("m1", client, holder))
        );
        assert_eq!(group_holder_of(&format!("m1:{holder}:lock_count")), None);
        assert_eq!(group_holder_of("m1"), None);
        assert_eq!(group_holder_of("m1:junk:expire_time"), None);
        for owner in [Owner::Task(1), Owner::Thread(2), Owner::Scope(3)] {
            assert_eq!(parse_owner(&owner_field(owner)), Some(owner));
        }
    }

    #[test]
    fn read_replies_decode_or_are_refused_with_a_typed_error() {
        use redis::Value;
        let blocked = Blocked {
            owner: Owner::Task(7),
            service: "s".into(),
            name: "x".into(),
            kind: "lock".into(),
            holder: "00000000-0000-0000-0000-000000000001:1".into(),
            since_ms: 0,
            holds: vec![],
            members: Arc::default(),
            place: None,
            label: None,
        };
        let (field, value) = blocked.encode();
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        // No hash: nothing published, no write time.
        assert_eq!(
            decode_published(Value::Array(vec![])).unwrap(),
            Some(Published::default())
        );
        // Over the bounds: not read, not an error.
        assert_eq!(
            decode_published(Value::SimpleString("OVERSIZED".into())).unwrap(),
            None
        );
        // An entry that is not UTF-8 is skipped; the others are read.
        let read = decode_published(Value::Array(vec![
            Value::Int(1_234),
            Value::BulkString(b"task:\xff".to_vec()),
            bulk(&format!("99\n{value}")),
            bulk(&field),
            bulk(&format!("99\n{value}")),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(read.written_ms, 1_234);
        assert_eq!(
            read.waits,
            vec![Blocked {
                since_ms: 99,
                ..blocked
            }]
        );
        // Not an array, or a write time that is not an integer: refused, typed.
        for bad in [
            Value::Int(1),
            Value::Array(vec![bulk("1234"), bulk(&field), bulk(&value)]),
        ] {
            assert!(
                matches!(
                    decode_published(bad),
                    Err(LockError::UnexpectedReply {
                        op: "read waits",
                        ..
                    })
                ),
                "a malformed reply is refused"
            );
        }
    }

    #[test]
    fn a_manager_publishes_its_longest_waits_within_what_readers_read() {
        let wait = |n: u64, holds: usize| {
            let blocked = Blocked {
                owner: Owner::Task(n),
                service: "s".into(),
                name: "x".into(),
                kind: "lock".into(),
                holder: "h:1".into(),
                since_ms: 0,
                holds: vec![("held".into(), "h:1".into()); holds],
                members: Arc::default(),
                place: None,
                label: None,
            };
            (blocked, Duration::from_millis(n))
        };
        let many: Vec<_> = (1..=1500).map(|n| wait(n, 0)).collect();
        let written = publishable(&many);
        assert_eq!(written.len(), MAX_WAITS_FIELDS);
        assert_eq!(written[0].1, "1500", "the longest first");
        assert_eq!(written[999].1, "501");
        // Big entries: cut by bytes, well under what a reader reads.
        let big: Vec<_> = (1..=100).map(|n| wait(n, 2_000)).collect();
        let written = publishable(&big);
        let bytes: usize = written
            .iter()
            .map(|(f, w, v)| f.len() + w.len() + v.len())
            .sum();
        assert!(
            !written.is_empty() && written.len() < 100,
            "{}",
            written.len()
        );
        assert!(bytes <= MAX_WAITS_BYTES / 2, "{bytes}");
    }

    #[test]
    fn holder_fields_name_their_client() {
        let id = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9";
        let (plain, write) = (format!("{id}:12"), format!("{id}:12:write"));
        assert_eq!(holder_of(&plain), Some((id, plain.as_str())));
        assert_eq!(holder_of(&write), Some((id, plain.as_str())));
        assert_eq!(holder_of("mode"), None);
        assert_eq!(holder_of("someone:else"), None);
    }
}
