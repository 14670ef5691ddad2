//! The Java side, played by a raw client: Redisson's synchronizer operations written from the
//! wire semantics (keys, values, messages) that docs/protocol.md states, as an independent
//! Redisson-compatible client would run them; the read lock's and fair lock's operations
//! (below) follow Redisson 4.4+'s behaviour step by step. Nothing here is copied from Redisson
//! but the spin lock's scripts (at the end, Redisson's own), and nothing uses lockman's scripts; in particular expiry uses this client's own clock, as
//! Java's does.

use redis::{Connection, Script};

/// Redisson's score of a permit without a lease.
pub const NO_LEASE: i64 = 922_337_203_685_477;

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(since.as_millis()).expect("ms fit")
}

/// RSemaphore.tryAcquire(n): DECRBY when enough are free.
pub fn semaphore_try_acquire(conn: &mut Connection, name: &str, n: u32) -> bool {
    let script = Script::new(
        "local v = redis.call('get', KEYS[1]); \
         if v ~= false and tonumber(v) >= tonumber(ARGV[1]) then \
           redis.call('decrby', KEYS[1], ARGV[1]); return 1 end; return 0",
    );
    script
        .key(name)
        .arg(n)
        .invoke::<i64>(conn)
        .expect("tryAcquire")
        == 1
}

/// RSemaphore.release(n): INCRBY, publish the new free count on `redisson_sc:{name}`.
pub fn semaphore_release(conn: &mut Connection, name: &str, n: u32) {
    let script = Script::new(
        "local v = redis.call('incrby', KEYS[1], ARGV[1]); \
         redis.call('publish', KEYS[2], v)",
    );
    script
        .key(name)
        .key(format!("redisson_sc:{{{name}}}"))
        .arg(n)
        .invoke::<()>(conn)
        .expect("release");
}

/// RSemaphore.trySetPermits(n).
pub fn semaphore_try_set(conn: &mut Connection, name: &str, n: u32) -> bool {
    let script = Script::new(
        "local v = redis.call('get', KEYS[1]); \
         if v == false then redis.call('set', KEYS[1], ARGV[1]); \
           redis.call('publish', KEYS[2], ARGV[1]); return 1 end; return 0",
    );
    script
        .key(name)
        .key(format!("redisson_sc:{{{name}}}"))
        .arg(n)
        .invoke::<i64>(conn)
        .expect("trySetPermits")
        == 1
}

/// RPermitExpirableSemaphore.tryAcquire(lease) of one permit with id `id`: reclaim at most one
/// expired permit by this client's clock, then take one; `lease_ms` of `None` is no lease.
pub fn permit_try_acquire(
    conn: &mut Connection,
    name: &str,
    id: [u8; 16],
    lease_ms: Option<i64>,
) -> bool {
    let script = Script::new(
        "local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[4], 'limit', 0, 1); \
         if #expired > 0 then redis.call('zrem', KEYS[2], unpack(expired)); \
           local v = redis.call('incrby', KEYS[1], #expired); \
           if v > 0 then redis.call('publish', KEYS[3], v) end end; \
         local v = redis.call('get', KEYS[1]); \
         if v ~= false and tonumber(v) >= 1 then \
           redis.call('decrby', KEYS[1], 1); \
           redis.call('zadd', KEYS[2], ARGV[2], ARGV[1]); return 'OK' end; \
         return false",
    );
    let now = now_ms();
    let score = lease_ms.map_or(NO_LEASE, |l| now + l);
    let reply: Option<String> = script
        .key(name)
        .key(format!("{{{name}}}:timeout"))
        .key(format!("redisson_sc:{{{name}}}"))
        .arg(&id[..])
        .arg(score)
        .arg(0)
        .arg(now)
        .invoke(conn)
        .expect("tryAcquire permit");
    reply.as_deref() == Some("OK")
}

/// RPermitExpirableSemaphore.release(id): 1 when it was held (publishes the new free count).
pub fn permit_release(conn: &mut Connection, name: &str, id: [u8; 16]) -> i64 {
    let script = Script::new(
        "local removed = redis.call('zrem', KEYS[2], ARGV[1]); \
         if removed == 0 then return 0 end; \
         local v = redis.call('incrby', KEYS[1], 1); \
         redis.call('publish', KEYS[3], v); return 1",
    );
    script
        .key(name)
        .key(format!("{{{name}}}:timeout"))
        .key(format!("redisson_sc:{{{name}}}"))
        .arg(&id[..])
        .invoke(conn)
        .expect("release permit")
}

/// RCountDownLatch.trySetCount(c): publishes `1`.
pub fn latch_try_set(conn: &mut Connection, name: &str, count: u64) -> bool {
    let script = Script::new(
        "if redis.call('exists', KEYS[1]) == 0 then redis.call('set', KEYS[1], ARGV[1]); \
           redis.call('publish', KEYS[2], '1'); return 1 end; return 0",
    );
    script
        .key(name)
        .key(latch_channel(name))
        .arg(count)
        .invoke::<i64>(conn)
        .expect("trySetCount")
        == 1
}

/// RCountDownLatch.countDown(): at zero deletes the key and publishes `0`.
pub fn latch_count_down(conn: &mut Connection, name: &str) {
    let script = Script::new(
        "local v = redis.call('decr', KEYS[1]); \
         if v <= 0 then redis.call('del', KEYS[1]) end; \
         if v == 0 then redis.call('publish', KEYS[2], '0') end",
    );
    script
        .key(name)
        .key(latch_channel(name))
        .invoke::<()>(conn)
        .expect("countDown");
}

/// RCountDownLatch's channel: braces always added.
pub fn latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// RPermitExpirableSemaphore.addPermits(d): `SET free + d`, and publish `d` only when it is
/// positive (not the new free count). Returns the new free count.
pub fn permit_add_permits(conn: &mut Connection, name: &str, d: i64) -> i64 {
    let script = Script::new(
        "local v = tonumber(redis.call('get', KEYS[1]) or '0') + tonumber(ARGV[1]); \
         redis.call('set', KEYS[1], v); \
         if tonumber(ARGV[1]) > 0 then redis.call('publish', KEYS[2], ARGV[1]) end; \
         return v",
    );
    script
        .key(name)
        .key(format!("redisson_sc:{{{name}}}"))
        .arg(d)
        .invoke(conn)
        .expect("addPermits")
}

/// RPermitExpirableSemaphore.tryRelease(List) (3.41+): all or nothing. When any id is missing
/// or expired by this client's clock: 0, nothing changed. Else every expired permit is
/// reclaimed (the free count published when positive), the ids are removed, the free count goes
/// up by their number and **that number** is published (not the new free count); the reply is
/// that number. (`release(List)` is this, throwing unless all were released.)
pub fn permit_release_many(conn: &mut Connection, name: &str, ids: &[[u8; 16]]) -> i64 {
    let script = Script::new(
        "local now = tonumber(ARGV[1]); \
         for i = 2, #ARGV do \
           local s = redis.call('zscore', KEYS[2], ARGV[i]); \
           if not s or tonumber(s) <= now then return 0 end end; \
         local old = redis.call('zrangebyscore', KEYS[2], 0, now); \
         for _, id in ipairs(old) do redis.call('zrem', KEYS[2], id) end; \
         if #old > 0 then local v = redis.call('incrby', KEYS[1], #old); \
           if v > 0 then redis.call('publish', KEYS[3], v) end end; \
         local n = 0; \
         for i = 2, #ARGV do n = n + redis.call('zrem', KEYS[2], ARGV[i]) end; \
         redis.call('incrby', KEYS[1], n); \
         redis.call('publish', KEYS[3], n); return n",
    );
    let mut invocation = script.prepare_invoke();
    invocation
        .key(name)
        .key(format!("{{{name}}}:timeout"))
        .key(format!("redisson_sc:{{{name}}}"))
        .arg(now_ms());
    for id in ids {
        invocation.arg(&id[..]);
    }
    invocation.invoke(conn).expect("tryRelease(List)")
}

/// RSemaphore.trySetPermits(permits, ttl) (3.29+): only when the key is missing, `SET` it with
/// `PX ttl` and publish the permits; true when set.
pub fn semaphore_try_set_with_ttl(conn: &mut Connection, name: &str, n: u32, ttl_ms: i64) -> bool {
    let script = Script::new(
        "if redis.call('exists', KEYS[1]) == 1 then return 0 end; \
         redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2]); \
         redis.call('publish', KEYS[2], ARGV[1]); return 1",
    );
    script
        .key(name)
        .key(format!("redisson_sc:{{{name}}}"))
        .arg(n)
        .arg(ttl_ms)
        .invoke::<i64>(conn)
        .expect("trySetPermits(ttl)")
        == 1
}

/// RSemaphore.releaseIfExists(n) (4.0+): a missing key is left missing (false); else
/// `INCRBY n` and the new free count published (true).
pub fn semaphore_release_if_exists(conn: &mut Connection, name: &str, n: u32) -> bool {
    let script = Script::new(
        "if redis.call('exists', KEYS[1]) == 0 then return 0 end; \
         local v = redis.call('incrby', KEYS[1], ARGV[1]); \
         redis.call('publish', KEYS[2], v); return 1",
    );
    script
        .key(name)
        .key(format!("redisson_sc:{{{name}}}"))
        .arg(n)
        .invoke::<i64>(conn)
        .expect("releaseIfExists")
        == 1
}

/// RPermitExpirableSemaphore.getLeaseTime(id) (3.41+): reclaims every permit expired by this
/// client's clock (publishing the free count when positive), then replies the ms left of `id`,
/// `-1` for a permit without a lease, `0` when it is not held (Java then throws).
pub fn permit_lease_time(conn: &mut Connection, name: &str, id: [u8; 16]) -> i64 {
    let script = Script::new(
        "local now = tonumber(ARGV[3]); \
         local old = redis.call('zrangebyscore', KEYS[2], 0, now); \
         for _, x in ipairs(old) do redis.call('zrem', KEYS[2], x) end; \
         if #old > 0 then local v = redis.call('incrby', KEYS[1], #old); \
           if v > 0 then redis.call('publish', KEYS[3], v) end end; \
         local s = redis.call('zscore', KEYS[2], ARGV[1]); \
         if not s then return 0 end; \
         if tonumber(s) == tonumber(ARGV[2]) then return -1 end; \
         return tonumber(s) - now",
    );
    script
        .key(name)
        .key(format!("{{{name}}}:timeout"))
        .key(format!("redisson_sc:{{{name}}}"))
        .arg(&id[..])
        .arg(NO_LEASE)
        .arg(now_ms())
        .invoke(conn)
        .expect("getLeaseTime")
}

// ---------------------------------------------------------------------------------------------
// The read lock's and the fair lock's wire operations as Redisson 4.4+ performs them, written
// here from their semantics (keys, arguments, effects, replies), not copied: each script says
// which Redisson method it plays. The functions below pass the keys and arguments that the Java
// method passes. `lockName` is Redisson's holder: `<client uuid>:<thread id>`.
// ---------------------------------------------------------------------------------------------

/// Plays `RedissonReadLock.tryLockInnerAsync`. KEYS: name, `{name}:<lockName>:rwlock_timeout`;
/// ARGV: lease ms, lockName, `<lockName>:write`. A free lock, a read-mode lock, or a write-mode
/// lock whose writer is this lockName takes one more read hold: the holder's field counts it
/// (a free lock's is set to 1), hold number n gets its own timeout key `<prefix>:n` with the lease, and the hash lives at
/// least as long as the lease. Reply: nil when acquired, else the hash's PTTL.
pub const READ_LOCK_ACQUIRE: &str = r#"
local hash, stamp_prefix = KEYS[1], KEYS[2]
local lease, holder, own_writer = ARGV[1], ARGV[2], ARGV[3]
local current = redis.call('HGET', hash, 'mode')
local may_read = current == false or current == 'read'
  or (current == 'write' and redis.call('HEXISTS', hash, own_writer) == 1)
if not may_read then
  return redis.call('PTTL', hash)
end
local nth = 1
if current == false then
  redis.call('HSET', hash, 'mode', 'read', holder, 1)
else
  nth = redis.call('HINCRBY', hash, holder, 1)
end
redis.call('SET', stamp_prefix .. ':' .. nth, 1, 'PX', lease)
if current == false then
  redis.call('PEXPIRE', hash, lease)
else
  local left = redis.call('PTTL', hash)
  if left < tonumber(lease) then left = lease end
  redis.call('PEXPIRE', hash, left)
end
return nil
"#;

/// Plays `RedissonReadLock.unlockInnerAsync`. KEYS: name, `redisson_rwlock:{name}`, this
/// holder's timeout-key prefix, `{name}`, the unlock latch; ARGV: `0`, lockName, publish
/// command, latch ms. A repeated request answers from the latch. A missing lock publishes the
/// wake-up (nil); a lockName holding nothing is nil. Otherwise one hold goes (field and its
/// newest timeout key); if other fields remain, the hash is kept alive for the longest
/// remaining read timeout key (reply 0), or kept as is in write mode (0); else the hash is
/// deleted and `0` published (reply 1). Replies other than nil are recorded in the latch.
pub const READ_LOCK_UNLOCK: &str = r#"
local hash, channel, own_stamps, tag, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local wake, holder, publish, latch_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local seen = redis.call('GET', latch)
if seen then return tonumber(seen) end
local function done(reply)
  redis.call('SET', latch, reply, 'PX', latch_ms)
  return reply
end
local current = redis.call('HGET', hash, 'mode')
if not current then
  redis.call(publish, channel, wake)
  redis.call('SET', latch, 1, 'PX', latch_ms)
  return nil
end
if redis.call('HEXISTS', hash, holder) == 0 then return nil end
local left = redis.call('HINCRBY', hash, holder, -1)
if left == 0 then redis.call('HDEL', hash, holder) end
redis.call('DEL', own_stamps .. ':' .. (left + 1))
if redis.call('HLEN', hash) > 1 then
  local longest = -3
  local fields = redis.call('HKEYS', hash)
  for _, field in ipairs(fields) do
    local holds = tonumber(redis.call('HGET', hash, field))
    if holds then
      for n = 1, holds do
        local ttl = redis.call('PTTL', tag .. ':' .. field .. ':rwlock_timeout:' .. n)
        if ttl > longest then longest = ttl end
      end
    end
  end
  if longest > 0 then
    redis.call('PEXPIRE', hash, longest)
    return done(0)
  end
  if current == 'write' then return done(0) end
end
redis.call('DEL', hash)
redis.call(publish, channel, wake)
return done(1)
"#;

/// Plays one run of Redisson's `renewal/ReadLockTask` (4.4.0+), which renews only the calling
/// client's own read holds. KEYS: pairs of name, `{name}`; ARGV: the watchdog timeout ms, then
/// for each pair the number of this client's lockNames and those lockNames. For each lock, each
/// listed holder still in the hash has every one of its timeout keys set to the timeout, and then
/// the hash too; the reply has one entry per lock: 1 when anything was renewed, else 0.
pub const READ_LOCK_RENEW: &str = r#"
local timeout = ARGV[1]
local cursor = 2
local renewed = {}
for k = 1, #KEYS, 2 do
  local hash, tag = KEYS[k], KEYS[k + 1]
  local listed = tonumber(ARGV[cursor])
  cursor = cursor + 1
  local alive = 0
  for j = cursor, cursor + listed - 1 do
    local holds = redis.call('HGET', hash, ARGV[j])
    if holds then
      alive = 1
      for n = 1, tonumber(holds) do
        redis.call('PEXPIRE', tag .. ':' .. ARGV[j] .. ':rwlock_timeout:' .. n, timeout)
      end
    end
  end
  cursor = cursor + listed
  if alive == 1 then redis.call('PEXPIRE', hash, timeout) end
  renewed[#renewed + 1] = alive
end
return renewed
"#;

/// Drops the queue's heads whose deadline (by the caller's clock, `now`) has passed; shared by
/// the fair scripts below, which all begin this way in Redisson.
const FAIR_PRUNE: &str = r#"
local function prune(queue, deadlines, now)
  while true do
    local head = redis.call('LINDEX', queue, 0)
    if not head then return end
    local due = redis.call('ZSCORE', deadlines, head)
    if not due or tonumber(due) > tonumber(now) then return end
    redis.call('ZREM', deadlines, head)
    redis.call('LPOP', queue)
  end
end
"#;

/// Plays `RedissonFairLock.tryLockInnerAsync` in its waiting form (EVAL_LONG). KEYS: name,
/// queue, deadlines; ARGV: lease ms, lockName, wait ms, now ms. After pruning: a free lock with
/// no queue, or with this lockName at the head, is taken (the head leaves the queue and every
/// other waiter's deadline moves `wait` earlier); the holder re-enters; a queued waiter gets
/// the hash's PTTL (at least 0); a new waiter is queued with a deadline of `wait` after the
/// last waiter's (or after the hash's PTTL) and gets that wait. Reply: nil when acquired.
pub fn fair_acquire_script() -> String {
    fair_acquire_text(REENTER)
}

/// The fair acquire's re-entry step: the holder's count goes up.
const REENTER: &str = r#"
  redis.call('HINCRBY', hash, holder, 1)
  redis.call('PEXPIRE', hash, lease)
  return nil"#;

/// The non-reentrant fair lock's in its place: the error reply, nothing changed.
const REFUSE_REENTRY: &str = r#"
  return redis.error_reply('NON_REENTRANT_REACQUIRE')"#;

/// Plays `RedissonNonReentrantFairLock.tryLockInnerAsync` in its waiting form (4.4+): the fair
/// acquire above, except that a lockName holding the lock gets the error reply
/// `NON_REENTRANT_REACQUIRE` (Java throws `IllegalMonitorStateException`) and nothing changes.
pub fn fair_non_reentrant_acquire_script() -> String {
    fair_acquire_text(REFUSE_REENTRY)
}

fn fair_acquire_text(reentry: &str) -> String {
    format!(
        "{FAIR_PRUNE}{}",
        r#"
local hash, queue, deadlines = KEYS[1], KEYS[2], KEYS[3]
local lease, holder, wait, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
prune(queue, deadlines, now)
if redis.call('EXISTS', hash) == 0 then
  local head = redis.call('LINDEX', queue, 0)
  if not head or head == holder then
    redis.call('LPOP', queue)
    redis.call('ZREM', deadlines, holder)
    for _, other in ipairs(redis.call('ZRANGE', deadlines, 0, -1)) do
      redis.call('ZINCRBY', deadlines, -wait, other)
    end
    redis.call('HSET', hash, holder, 1)
    redis.call('PEXPIRE', hash, lease)
    return nil
  end
end
if redis.call('HEXISTS', hash, holder) == 1 then{REENTRY}
end
if redis.call('ZSCORE', deadlines, holder) then
  local ttl = redis.call('PTTL', hash)
  if ttl < 0 then ttl = 0 end
  return ttl
end
local ttl = redis.call('PTTL', hash)
local last = redis.call('LINDEX', queue, -1)
if last and last ~= holder then
  local last_due = redis.call('ZSCORE', deadlines, last)
  if last_due then ttl = tonumber(last_due) - now end
end
if redis.call('ZADD', deadlines, ttl + wait + now, holder) == 1 then
  redis.call('RPUSH', queue, holder)
end
return ttl
"#
        .replace("{REENTRY}", reentry)
    )
}

/// Plays `RedissonFairLock.unlockInnerAsync`. KEYS: name, queue, deadlines,
/// `redisson_lock__channel:{name}`, the unlock latch; ARGV: `0`, lease ms, lockName, now ms,
/// publish command, latch ms. A repeated request answers from the latch. After pruning: a
/// missing lock wakes the head on its own channel (`<channel>:<head>`), reply 1; a lockName
/// that holds nothing gets nil; a re-entered hold drops one count and keeps the lease (0); the
/// last hold deletes the hash and wakes the head (1). Non-nil replies go into the latch.
pub fn fair_unlock_script() -> String {
    format!(
        "{FAIR_PRUNE}{}",
        r#"
local hash, queue, deadlines, channel, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local wake, lease, holder, now, publish, latch_ms =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local seen = redis.call('GET', latch)
if seen then return tonumber(seen) end
prune(queue, deadlines, now)
local function wake_head()
  local head = redis.call('LINDEX', queue, 0)
  if head then redis.call(publish, channel .. ':' .. head, wake) end
end
if redis.call('EXISTS', hash) == 0 then
  wake_head()
  redis.call('SET', latch, 1, 'PX', latch_ms)
  return 1
end
if redis.call('HEXISTS', hash, holder) == 0 then return nil end
if redis.call('HINCRBY', hash, holder, -1) > 0 then
  redis.call('PEXPIRE', hash, lease)
  redis.call('SET', latch, 0, 'PX', latch_ms)
  return 0
end
redis.call('DEL', hash)
redis.call('SET', latch, 1, 'PX', latch_ms)
wake_head()
return 1
"#
    )
}

/// Plays `RedissonFairLock.forceUnlockAsync`. KEYS: name, queue, deadlines,
/// `redisson_lock__channel:{name}`; ARGV: `0`, now ms, publish command. After pruning, deletes
/// the hash; when there was one, wakes the head on its own channel and replies 1, else 0.
pub fn fair_force_unlock_script() -> String {
    format!(
        "{FAIR_PRUNE}{}",
        r#"
local hash, queue, deadlines, channel = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local wake, now, publish = ARGV[1], ARGV[2], ARGV[3]
prune(queue, deadlines, now)
if redis.call('DEL', hash) == 0 then return 0 end
local head = redis.call('LINDEX', queue, 0)
if head then redis.call(publish, channel .. ':' .. head, wake) end
return 1
"#
    )
}

/// Plays `RedissonFairLock.acquireFailedAsync` (a waiter gives up). KEYS: queue, deadlines;
/// ARGV: lockName, wait ms. Every waiter queued behind this lockName has its deadline moved
/// `wait` earlier; then the lockName leaves the deadlines and the queue.
pub const FAIR_ACQUIRE_FAILED: &str = r#"
local queue, deadlines = KEYS[1], KEYS[2]
local holder, wait = ARGV[1], tonumber(ARGV[2])
local behind = false
for _, entry in ipairs(redis.call('LRANGE', queue, 0, -1)) do
  if behind then
    redis.call('ZINCRBY', deadlines, -wait, entry)
  elseif entry == holder then
    behind = true
  end
end
redis.call('ZREM', deadlines, holder)
redis.call('LREM', queue, 0, holder)
"#;

/// Redisson's `prefixName(prefix, name)`: `prefix:{name}`, or `prefix:name` when the name
/// already carries a `{`.
pub fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// Redisson's `suffixName(name, suffix)`: `{name}:suffix`, or `name:suffix` when the name
/// already carries a `{`.
pub fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// A read hold's timeout key: `{name}:<lockName>:rwlock_timeout:<i>`.
pub fn read_timeout_key(name: &str, lock_name: &str, i: u32) -> String {
    format!("{}:rwlock_timeout:{i}", suffix_name(name, lock_name))
}

/// The latch timeout Redisson passes to its unlock scripts (timeout × retry attempts, with its
/// default settings about this).
const UNLOCK_LATCH_MS: i64 = 13_500;

/// A fresh unlock request id, as Redisson's `generateId` (16 random bytes, hex).
fn request_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// RReadWriteLock.readLock().tryLock(0, lease): `None` when acquired, else the hash's PTTL.
pub fn read_lock(conn: &mut Connection, name: &str, lock_name: &str, lease_ms: i64) -> Option<i64> {
    Script::new(READ_LOCK_ACQUIRE)
        .key(name)
        .key(format!("{}:rwlock_timeout", suffix_name(name, lock_name)))
        .arg(lease_ms)
        .arg(lock_name)
        .arg(format!("{lock_name}:write"))
        .invoke(conn)
        .expect("read lock")
}

/// RReadWriteLock.readLock().unlock(): the script's reply (nil, 0 or 1), then the latch
/// deleted, as `RedissonBaseLock.unlockAsync0` does.
pub fn read_unlock(conn: &mut Connection, name: &str, lock_name: &str) -> Option<i64> {
    let latch = format!(
        "{}:{}",
        prefix_name("redisson_unlock_latch", name),
        request_id()
    );
    let reply = Script::new(READ_LOCK_UNLOCK)
        .key(name)
        .key(prefix_name("redisson_rwlock", name))
        .key(format!("{}:rwlock_timeout", suffix_name(name, lock_name)))
        .key(if name.contains('{') {
            name.to_owned()
        } else {
            format!("{{{name}}}")
        })
        .key(&latch)
        .arg(0)
        .arg(lock_name)
        .arg("publish")
        .arg(UNLOCK_LATCH_MS)
        .invoke(conn)
        .expect("read unlock");
    redis::cmd("DEL").arg(&latch).exec(conn).expect("del latch");
    reply
}

/// One `ReadLockTask` renewal of this client's read holds of `name`: 1 when any was renewed.
pub fn read_renew(conn: &mut Connection, name: &str, lock_names: &[&str], timeout_ms: i64) -> i64 {
    let script = Script::new(READ_LOCK_RENEW);
    let mut call = script.prepare_invoke();
    call.key(name)
        .key(if name.contains('{') {
            name.to_owned()
        } else {
            format!("{{{name}}}")
        })
        .arg(timeout_ms)
        .arg(lock_names.len());
    for n in lock_names {
        call.arg(*n);
    }
    let reply: Vec<i64> = call.invoke(conn).expect("read renew");
    reply[0]
}

/// RFairLock.tryLock(wait, lease) — one attempt of it (EVAL_LONG, which queues the caller):
/// `None` when acquired, else the TTL to wait.
pub fn fair_try_lock(
    conn: &mut Connection,
    name: &str,
    lock_name: &str,
    lease_ms: i64,
    wait_ms: i64,
) -> Option<i64> {
    Script::new(&fair_acquire_script())
        .key(name)
        .key(prefix_name("redisson_lock_queue", name))
        .key(prefix_name("redisson_lock_timeout", name))
        .arg(lease_ms)
        .arg(lock_name)
        .arg(wait_ms)
        .arg(now_ms())
        .invoke(conn)
        .expect("fair tryLock")
}

/// RFairLock.unlock(): the script's reply, then the latch deleted.
pub fn fair_unlock(
    conn: &mut Connection,
    name: &str,
    lock_name: &str,
    lease_ms: i64,
) -> Option<i64> {
    let latch = format!(
        "{}:{}",
        prefix_name("redisson_unlock_latch", name),
        request_id()
    );
    let reply = Script::new(&fair_unlock_script())
        .key(name)
        .key(prefix_name("redisson_lock_queue", name))
        .key(prefix_name("redisson_lock_timeout", name))
        .key(prefix_name("redisson_lock__channel", name))
        .key(&latch)
        .arg(0)
        .arg(lease_ms)
        .arg(lock_name)
        .arg(now_ms())
        .arg("publish")
        .arg(UNLOCK_LATCH_MS)
        .invoke(conn)
        .expect("fair unlock");
    redis::cmd("DEL").arg(&latch).exec(conn).expect("del latch");
    reply
}

/// RFairLock.forceUnlock(): true when a lock was deleted.
pub fn fair_force_unlock(conn: &mut Connection, name: &str) -> bool {
    let reply: Option<i64> = Script::new(&fair_force_unlock_script())
        .key(name)
        .key(prefix_name("redisson_lock_queue", name))
        .key(prefix_name("redisson_lock_timeout", name))
        .key(prefix_name("redisson_lock__channel", name))
        .arg(0)
        .arg(now_ms())
        .arg("publish")
        .invoke(conn)
        .expect("fair forceUnlock");
    reply == Some(1)
}

/// A fair waiter that gives up (`acquireFailedAsync`): leaves the queue.
pub fn fair_give_up(conn: &mut Connection, name: &str, lock_name: &str, wait_ms: i64) {
    Script::new(FAIR_ACQUIRE_FAILED)
        .key(prefix_name("redisson_lock_queue", name))
        .key(prefix_name("redisson_lock_timeout", name))
        .arg(lock_name)
        .arg(wait_ms)
        .invoke::<()>(conn)
        .expect("fair acquireFailed");
}

/// Plays `RedissonNonReentrantLock.tryLockInnerAsync` (4.4+). KEYS: name; ARGV: lease ms,
/// lockName, the error text. A missing lock is taken (the lockName's field at 1, the lease as
/// PTTL): nil; a lockName that holds it gets the error reply `NON_REENTRANT_REACQUIRE` and
/// nothing changes; else the PTTL.
pub const NON_REENTRANT_ACQUIRE: &str = r#"
local hash, lease, holder, refusal = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
if redis.call('EXISTS', hash) == 1 then
  if redis.call('HEXISTS', hash, holder) == 1 then
    return redis.error_reply(refusal)
  end
  return redis.call('PTTL', hash)
end
redis.call('HINCRBY', hash, holder, 1)
redis.call('PEXPIRE', hash, lease)
return nil
"#;

/// RLock / non-reentrant lock `tryLock(0, lease)` of Redisson's non-reentrant lock:
/// `Ok(None)` when acquired, `Ok(Some(pttl))` when busy, `Err(text)` for an error reply (Redis 7 sends a code-less
/// script error as `ERR NON_REENTRANT_REACQUIRE`; Redisson looks for the text).
pub fn non_reentrant_try_lock(
    conn: &mut Connection,
    name: &str,
    lock_name: &str,
    lease_ms: i64,
) -> Result<Option<i64>, String> {
    Script::new(NON_REENTRANT_ACQUIRE)
        .key(name)
        .arg(lease_ms)
        .arg(lock_name)
        .arg("NON_REENTRANT_REACQUIRE")
        .invoke(conn)
        .map_err(|e| e.to_string())
}

/// RNonReentrantFairLock.tryLock(wait, lease), one attempt (EVAL_LONG): as [`fair_try_lock`],
/// with `Err(text)` for an error reply.
pub fn non_reentrant_fair_try_lock(
    conn: &mut Connection,
    name: &str,
    lock_name: &str,
    lease_ms: i64,
    wait_ms: i64,
) -> Result<Option<i64>, String> {
    Script::new(&fair_non_reentrant_acquire_script())
        .key(name)
        .key(prefix_name("redisson_lock_queue", name))
        .key(prefix_name("redisson_lock_timeout", name))
        .arg(lease_ms)
        .arg(lock_name)
        .arg(wait_ms)
        .arg(now_ms())
        .invoke(conn)
        .map_err(|e| e.to_string())
}

/// Plays `RedissonBaseLock.unlockInnerAsync` of RLock (and the non-reentrant lock, which keeps
/// it), without its unlock latch (the latch only makes Java's own resends safe): a lockName
/// holding nothing gets nil; a count above one is decremented and the lease restored (0); the
/// last hold deletes the hash and publishes `0` on `redisson_lock__channel:{name}` (1).
pub fn lock_unlock(
    conn: &mut Connection,
    name: &str,
    lock_name: &str,
    lease_ms: i64,
) -> Option<i64> {
    Script::new(
        r#"
local hash, channel, lease, holder = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
if redis.call('HEXISTS', hash, holder) == 0 then return nil end
if redis.call('HINCRBY', hash, holder, -1) > 0 then
  redis.call('PEXPIRE', hash, lease)
  return 0
end
redis.call('DEL', hash)
redis.call('PUBLISH', channel, 0)
return 1
"#,
    )
    .key(name)
    .key(prefix_name("redisson_lock__channel", name))
    .arg(lease_ms)
    .arg(lock_name)
    .invoke(conn)
    .expect("unlock")
}

// The spin lock: unlike the rest of this file, these are Redisson's own scripts, as
// `RedissonSpinLock` (Redisson 4.x, Apache-2.0) sends them, character for character: the spin
// lock's tests run Java's side as Java runs it.

/// `RedissonSpinLock.tryLockInnerAsync`. KEYS: name; ARGV: lease ms, lockName. nil when
/// acquired (or re-entered), else the PTTL.
pub const SPIN_ACQUIRE: &str = "if (redis.call('exists', KEYS[1]) == 0) then \
redis.call('hincrby', KEYS[1], ARGV[2], 1); \
redis.call('pexpire', KEYS[1], ARGV[1]); \
return nil; \
end; \
if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
redis.call('hincrby', KEYS[1], ARGV[2], 1); \
redis.call('pexpire', KEYS[1], ARGV[1]); \
return nil; \
end; \
return redis.call('pttl', KEYS[1]);";

/// `RedissonSpinLock.unlockInnerAsync`. KEYS: name, the unlock latch
/// (`redisson_unlock_latch:{name}:<requestId>`); ARGV: lease ms, lockName, the latch's timeout
/// ms. nil when lockName holds nothing; 0 when holds remain; 1 when the hash was deleted.
/// Publishes nothing.
pub const SPIN_UNLOCK: &str = "local val = redis.call('get', KEYS[2]); \
if val ~= false then \
return tonumber(val);\
end; \
if (redis.call('hexists', KEYS[1], ARGV[2]) == 0) then \
return nil;\
end; \
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); \
if (counter > 0) then \
redis.call('pexpire', KEYS[1], ARGV[1]); \
redis.call('set', KEYS[2], 0, 'px', ARGV[3]); \
return 0; \
else \
redis.call('del', KEYS[1]); \
redis.call('set', KEYS[2], 1, 'px', ARGV[3]); \
return 1; \
end; ";

/// `RedissonSpinLock.forceUnlockAsync`: a bare DEL. KEYS: name.
pub const SPIN_FORCE_UNLOCK: &str = "if (redis.call('del', KEYS[1]) == 1) then \
return 1 \
else \
return 0 \
end";

/// One spin attempt of Java's (`tryAcquire`): `None` when acquired, else the PTTL.
pub fn spin_try_lock(
    conn: &mut Connection,
    name: &str,
    lock_name: &str,
    lease_ms: i64,
) -> Option<i64> {
    Script::new(SPIN_ACQUIRE)
        .key(name)
        .arg(lease_ms)
        .arg(lock_name)
        .invoke(conn)
        .expect("spin tryLock")
}

/// Java's spin unlock with a fresh request id, then the latch's DEL that Redisson sends after
/// it (`RedissonBaseLock.unlockInnerAsync`).
pub fn spin_unlock(
    conn: &mut Connection,
    name: &str,
    lock_name: &str,
    lease_ms: i64,
) -> Option<i64> {
    let latch = format!(
        "{}:{}",
        prefix_name("redisson_unlock_latch", name),
        uuid::Uuid::new_v4()
    );
    let reply = Script::new(SPIN_UNLOCK)
        .key(name)
        .key(&latch)
        .arg(lease_ms)
        .arg(lock_name)
        .arg(30_000)
        .invoke(conn)
        .expect("spin unlock");
    redis::cmd("DEL").arg(&latch).exec(conn).expect("latch DEL");
    reply
}

/// Java's spin force unlock: whether there was a lock.
pub fn spin_force_unlock(conn: &mut Connection, name: &str) -> bool {
    Script::new(SPIN_FORCE_UNLOCK)
        .key(name)
        .invoke::<i64>(conn)
        .expect("spin forceUnlock")
        == 1
}

/// Java's `RedissonSpinLock.lock()` with the default back-off, as a blocking loop: attempts
/// until acquired, sleeping Redisson's `ExponentialBackOffPolicy` sleeps between them (1 ms
/// doubling to 128 ms; the jitter left out, its bounds are the same). Returns the attempts.
pub fn spin_lock(conn: &mut Connection, name: &str, lock_name: &str, lease_ms: i64) -> u32 {
    let (mut sleep, mut attempts) = (1u64, 0u32);
    loop {
        attempts += 1;
        if spin_try_lock(conn, name, lock_name, lease_ms).is_none() {
            return attempts;
        }
        std::thread::sleep(std::time::Duration::from_millis(sleep));
        sleep = (sleep * 2).min(128);
    }
}
