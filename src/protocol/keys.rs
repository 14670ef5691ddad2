//! Names of the Redis keys and channels of a lock, exactly as `protocol.md` (and Redisson) lays
//! them out. Pure functions: no I/O, no actix.

/// The message published on a lock's unlock channel at its final release.
pub(crate) const UNLOCK_MESSAGE: &str = "0";

/// `prefix:{name}`, or `prefix:name` when the name already carries a `{`, so that the name's own
/// hash tag decides the Redis Cluster slot and every key of one lock lands in one slot.
pub(crate) fn prefixed(prefix: &str, name: &str) -> String {
    // Built by hand: this runs for every release and every waiter, and `format!` took about
    // three times as many instructions here (callgrind).
    let tagged = !name.contains('{');
    let mut key = String::with_capacity(prefix.len() + name.len() + 3);
    key.push_str(prefix);
    key.push_str(if tagged { ":{" } else { ":" });
    key.push_str(name);
    if tagged {
        key.push('}');
    }
    key
}

/// [`prefixed`] as a command argument, written straight into the command: no `String` per
/// call (a release's unlock channel, on every release).
#[derive(Clone, Copy)]
pub(crate) struct Prefixed<'a> {
    pub prefix: &'static str,
    pub name: &'a str,
}

impl redis::ToRedisArgs for Prefixed<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        let tagged = !self.name.contains('{');
        let (open, close): (&[u8], &[u8]) = if tagged { (b":{", b"}") } else { (b":", b"") };
        let parts = [self.prefix.as_bytes(), open, self.name.as_bytes(), close];
        let len: usize = parts.iter().map(|part| part.len()).sum();
        // Put together on the stack and written as one argument when short (a release's unlock
        // channel, on every release): four writes into the command's buffer each check its room
        // and copy on their own (about 150 instructions more per release, callgrind).
        let mut buf = [0u8; PREFIXED_ON_STACK];
        if let Some(room) = buf.get_mut(..len) {
            let mut at = 0;
            for part in parts {
                room[at..at + part.len()].copy_from_slice(part);
                at += part.len();
            }
            out.write_arg(room);
            return;
        }
        use std::io::Write;
        let mut arg = out.writer_for_next_arg();
        for part in parts {
            // Writing into a command's buffer cannot fail.
            let _ = arg.write_all(part);
        }
    }
}

/// The longest [`Prefixed`] argument put together on the stack.
const PREFIXED_ON_STACK: usize = 128;

/// [`unlock_channel`] as a command argument, with no `String` made.
pub(crate) fn unlock_channel_arg(name: &str) -> Prefixed<'_> {
    Prefixed {
        prefix: "redisson_lock__channel",
        name,
    }
}

/// Checks a lock name: any bytes Redis accepts, but not the empty string.
pub(crate) fn validate_name(name: &str) -> Result<(), crate::error::LockError> {
    if name.is_empty() {
        return Err(crate::error::LockError::invalid(
            "lock name",
            "must not be empty",
        ));
    }
    Ok(())
}

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash tag — the bytes between the first
/// `{` and the next `}`, when there are any — or of the whole key, modulo 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// In Redis Cluster, every key and channel of a lock must share one slot (a script may only
/// touch one). That holds for any name without braces, and for a name whose own non-empty
/// `{tag}` decides every key; it fails for names such as `a{b`, `a}b` or `{}x{y}`, whose
/// braces make the lock hash and the derived keys hash differently.
pub(crate) fn check_cluster_name(name: &str) -> Result<(), crate::error::LockError> {
    let lock = slot(lock_key(name).as_bytes());
    let derived = [
        slot(unlock_channel(name).as_bytes()),
        slot(suffixed(name, "x").as_bytes()),
    ];
    if derived.iter().all(|&s| s == lock) {
        return Ok(());
    }
    Err(crate::error::LockError::invalid(
        "lock name",
        format!(
            "{name:?}: in Redis Cluster its braces would put the lock (slot {lock}) and its \
             channel and queue keys (slot {}) in different slots; use a name without braces, \
             or one with a non-empty {{tag}} that decides every key, like \"{{user42}}:orders\"",
            derived[0]
        ),
    ))
}

/// The channels on which the releases of lock `name` are published: that of the reentrant, fair
/// and fenced locks, and that of the read-write lock (`docs/protocol.md`). For tools that watch
/// a lock, like `lockman watch`; lockman's own waiters need not know them.
pub fn release_channels(name: &str) -> [String; 2] {
    [unlock_channel(name), rwlock_channel(name)]
}

/// The hash that holds a reentrant lock: the name itself.
pub(crate) fn lock_key(name: &str) -> &str {
    name
}

/// A reentrant lock's delay key (lockman's own, docs/protocol.md "Lock-delay"): while it lives
/// and the lock hash does not, lockman's acquires treat the lock as held.
pub(crate) fn delay_key(name: &str) -> String {
    prefixed("lockman_delay", name)
}

/// The channel on which a reentrant lock's final release is published.
pub(crate) fn unlock_channel(name: &str) -> String {
    prefixed("redisson_lock__channel", name)
}

/// `{name}:suffix`, or `name:suffix` when the name already carries a `{`.
pub(crate) fn suffixed(name: &str, suffix: &str) -> String {
    format!("{}:{suffix}", tagged(name))
}

/// `{name}`, or the name itself when it already carries a `{`: the start of keys derived from it.
pub(crate) fn tagged(name: &str) -> String {
    if name.contains('{') {
        name.to_owned()
    } else {
        format!("{{{name}}}")
    }
}

/// The counter whose value is a fenced lock's latest token.
pub(crate) fn token_key(name: &str) -> String {
    prefixed("redisson_lock_token", name)
}

/// A synchronizer's request latch (docs/protocol.md, "Requests sent again" under
/// "Synchronizers"), in Redisson's unlock-latch family: `redisson_unlock_latch:{name}:<field>`
/// (`<client id>:<kind letter><lane>`). Lock requests write none.
pub(crate) fn latch(name: &str, field: &str) -> String {
    let mut key = prefixed("redisson_unlock_latch", name);
    key.push(':');
    key.push_str(field);
    key
}

/// The channel of a semaphore (plain or permit-expirable): each message is a number of permits.
pub(crate) fn semaphore_channel(name: &str) -> String {
    prefixed("redisson_sc", name)
}

/// The sorted set of a permit semaphore's held permits: `{name}:timeout`.
pub(crate) fn permit_set(name: &str) -> String {
    suffixed(name, "timeout")
}

/// The channel of a count-down latch. Redisson always adds the braces here, whatever the name
/// holds, so a name with a `{` puts it in another slot ([`check_latch_name`]).
pub(crate) fn countdown_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// In Redis Cluster a latch's channel must share its key's slot: names holding `{` do not.
pub(crate) fn check_latch_name(name: &str) -> Result<(), crate::error::LockError> {
    if name.contains('{') {
        return Err(crate::error::LockError::invalid(
            "latch name",
            format!(
                "{name:?}: in Redis Cluster a count-down latch's channel always wraps the whole \
                 name in braces (as Redisson does), so a name holding `{{` would put the latch \
                 and its channel in different slots; use a name without braces"
            ),
        ));
    }
    Ok(())
}

/// The queue of a fair lock: waiting holders, oldest first.
pub(crate) fn fair_queue(name: &str) -> String {
    prefixed("redisson_lock_queue", name)
}

/// The deadlines of a fair lock's waiters (epoch ms on the client's clock).
pub(crate) fn fair_deadlines(name: &str) -> String {
    prefixed("redisson_lock_timeout", name)
}

/// A fair-lock waiter's own channel: only the head of the queue is woken.
pub(crate) fn fair_channel(name: &str, holder: &str) -> String {
    format!("{}:{holder}", unlock_channel(name))
}

/// The channel of a read-write lock: `0` wakes one waiter, `1` every waiter.
pub(crate) fn rwlock_channel(name: &str) -> String {
    prefixed("redisson_rwlock", name)
}

/// The message a write release publishes: every waiter may go (readers can all enter).
pub(crate) const WAKE_ALL_MESSAGE: &str = "1";

/// Whether a release message, read as a number, is [`WAKE_ALL_MESSAGE`].
pub(crate) fn wakes_all(count: Option<i64>) -> bool {
    count.is_some() && count == WAKE_ALL_MESSAGE.parse().ok()
}

/// The hash field of a writer: `<holder>:write`.
pub(crate) fn write_field(holder: &str) -> String {
    format!("{holder}:write")
}

/// The prefix of a reader's timeout keys: `{name}:<holder>:rwlock_timeout` (`:<i>` follows).
pub(crate) fn read_timeout_prefix(name: &str, holder: &str) -> String {
    suffixed(name, &format!("{holder}:rwlock_timeout"))
}

/// `<client id>:`, the start of every holder field of one client: written once per manager,
/// so that a handle made per request only writes its number (the id's hex digits cost a few
/// hundred instructions more per handle, callgrind).
#[derive(Clone, Copy, Debug)]
pub(crate) struct HolderPrefix([u8; HOLDER_ID + 1]);

/// The length of a client id in a holder field (hyphenated).
const HOLDER_ID: usize = uuid::fmt::Hyphenated::LENGTH;

impl HolderPrefix {
    /// The prefix of `client_id`'s holders.
    pub(crate) fn of(client_id: &uuid::Uuid) -> Self {
        let mut buf = [0u8; HOLDER_ID + 1];
        client_id.hyphenated().encode_lower(&mut buf[..HOLDER_ID]);
        buf[HOLDER_ID] = b':';
        Self(buf)
    }
}

/// The holder field of a lock handle: `<client id>:<n>` (`prefix` is the client id's), as what
/// it is kept in (`String`, `Arc<str>`). Written on the stack without a formatter and copied
/// into it once: a handle made per request makes one (the formatter and the copy from a
/// `String` cost about 1.5 k instructions and an allocation, BENCHMARKS.md).
pub(crate) fn holder<T: for<'a> From<&'a str>>(prefix: &HolderPrefix, n: u64) -> T {
    let mut buf = [0u8; HOLDER_ID + 1 + 20];
    buf[..=HOLDER_ID].copy_from_slice(&prefix.0);
    let mut digits = [0u8; 20];
    let (mut left, mut rest) = (digits.len(), n);
    loop {
        left -= 1;
        digits[left] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let len = HOLDER_ID + 1 + digits.len() - left;
    buf[HOLDER_ID + 1..len].copy_from_slice(&digits[left..]);
    match std::str::from_utf8(&buf[..len]) {
        Ok(holder) => T::from(holder),
        // Never: hex digits, hyphens, a colon and decimal digits.
        Err(_) => T::from(format!("{}{n}", String::from_utf8_lossy(&prefix.0)).as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_is_the_client_id_a_colon_and_the_number() {
        let id = uuid::Uuid::new_v4();
        for n in [0, 1, 9, 10, 12_345, u64::MAX] {
            let prefix = HolderPrefix::of(&id);
            let holder: String = holder(&prefix, n);
            assert_eq!(holder, format!("{}:{n}", id.hyphenated()));
            let shared: std::sync::Arc<str> = super::holder(&prefix, n);
            assert_eq!(&*shared, holder);
        }
    }

    #[test]
    fn channel_wraps_plain_names_in_a_hash_tag() {
        assert_eq!(unlock_channel("orders"), "redisson_lock__channel:{orders}");
        assert_eq!(unlock_channel("a b:c"), "redisson_lock__channel:{a b:c}");
    }

    #[test]
    fn channel_keeps_a_name_that_has_its_own_tag() {
        assert_eq!(
            unlock_channel("{user}:1"),
            "redisson_lock__channel:{user}:1"
        );
        assert_eq!(unlock_channel("x{"), "redisson_lock__channel:x{");
        // Short names are put together on the stack, long ones written part by part.
        let long = "n".repeat(PREFIXED_ON_STACK);
        let long_tagged = format!("{{t}}{long}");
        for name in ["orders", "a b:c", "{user}:1", "x{", "", &long, &long_tagged] {
            let arg = redis::ToRedisArgs::to_redis_args(&unlock_channel_arg(name));
            assert_eq!(arg, vec![unlock_channel(name).into_bytes()], "{name}");
        }
    }

    #[test]
    fn derived_keys_follow_redisson() {
        assert_eq!(token_key("t"), "redisson_lock_token:{t}");
        assert_eq!(rwlock_channel("rw"), "redisson_rwlock:{rw}");
        assert_eq!(rwlock_channel("{u}:1"), "redisson_rwlock:{u}:1");
        assert_eq!(write_field("id:3"), "id:3:write");
        assert_eq!(
            read_timeout_prefix("rw", "id:3"),
            "{rw}:id:3:rwlock_timeout"
        );
        assert_eq!(
            read_timeout_prefix("{u}:1", "id:3"),
            "{u}:1:id:3:rwlock_timeout"
        );
        assert_eq!(tagged("a"), "{a}");
        assert_eq!(fair_queue("f"), "redisson_lock_queue:{f}");
        assert_eq!(fair_deadlines("f"), "redisson_lock_timeout:{f}");
        assert_eq!(fair_channel("f", "id:1"), "redisson_lock__channel:{f}:id:1");
    }

    #[test]
    fn slots_match_redis() {
        // Values from CLUSTER KEYSLOT on Redis 7.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}")); // empty tag: the whole key
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn cluster_names_keep_every_key_in_one_slot() {
        for ok in ["orders", "a b:c", "{user42}:orders", "x}{y}", "\0nul"] {
            assert!(check_cluster_name(ok).is_ok(), "{ok:?}");
            assert_eq!(
                slot(ok.as_bytes()),
                slot(unlock_channel(ok).as_bytes()),
                "{ok:?}"
            );
            assert_eq!(
                slot(ok.as_bytes()),
                slot(fair_queue(ok).as_bytes()),
                "{ok:?}"
            );
            assert_eq!(
                slot(ok.as_bytes()),
                slot(read_timeout_prefix(ok, "h").as_bytes())
            );
        }
        for bad in ["a{b", "a}b", "{}a{b}", "{}x"] {
            let err = check_cluster_name(bad).expect_err(bad);
            assert!(err.to_string().contains("slot"), "{err}");
        }
    }

    #[test]
    fn lock_key_is_the_name_unchanged() {
        assert_eq!(lock_key("orders"), "orders");
        assert_eq!(lock_key("{user}:1"), "{user}:1");
    }

    #[test]
    fn holder_is_lowercase_hyphenated_uuid_and_number() {
        let id = uuid::Uuid::parse_str("9F1C0D2E-5B7A-4C1E-8D3F-2A6B1C9E0F11").unwrap();
        assert_eq!(
            holder::<String>(&HolderPrefix::of(&id), 7),
            "9f1c0d2e-5b7a-4c1e-8d3f-2a6b1c9e0f11:7"
        );
    }
}
