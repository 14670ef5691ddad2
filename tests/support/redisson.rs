//! The Java side, played by a raw client: Redisson's synchronizer operations written from the
//! wire semantics (keys, values, messages) that docs/protocol.md states, as an independent
//! Redisson-compatible client would run them; and Redisson's own read-lock and fair-lock scripts,
//! verbatim (below). Nothing here uses lockman's scripts; in particular expiry uses this
//! client's own clock, as Java's does.

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

/// RPermitExpirableSemaphore.tryRelease(List) (3.41+): all or nothing. When every id is held
/// and unexpired by this client's clock, removes them, `INCRBY`s the free count by their number
/// and publishes **that number** (not the new free count); returns 1. Else 0, nothing changed.
pub fn permit_release_many(conn: &mut Connection, name: &str, ids: &[[u8; 16]]) -> i64 {
    let script = Script::new(
        "for i = 2, #ARGV do \
           local s = redis.call('zscore', KEYS[2], ARGV[i]); \
           if s == false or tonumber(s) <= tonumber(ARGV[1]) then return 0 end end; \
         local removed = 0; \
         for i = 2, #ARGV do removed = removed + redis.call('zrem', KEYS[2], ARGV[i]) end; \
         redis.call('incrby', KEYS[1], removed); \
         redis.call('publish', KEYS[3], removed); return 1",
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

// ---------------------------------------------------------------------------------------------
// Redisson's read-lock and fair-lock scripts, verbatim: the Lua text of Redisson's
// `RedissonReadLock`, `renewal/ReadLockTask` and `RedissonFairLock` (redisson/redisson at
// commit 66863978b4a9, August 2026; Copyright (c) 2013-2026 Nikita Koksharov, Apache License
// 2.0), one Java string literal per line, run with the keys and arguments the Java client
// passes. Only the scripts' text is copied; the functions below pass what the Java methods pass.
// `lockName` is Redisson's holder: `<client uuid>:<thread id>`.
// ---------------------------------------------------------------------------------------------

/// `RedissonReadLock.tryLockInnerAsync`. KEYS: name, `{name}:<lockName>:rwlock_timeout`;
/// ARGV: lease ms, lockName, `<lockName>:write`. Reply: nil when acquired, else the PTTL.
pub const READ_LOCK_ACQUIRE: &str = concat!(
    "local mode = redis.call('hget', KEYS[1], 'mode'); ",
    "if (mode == false) then ",
    "redis.call('hset', KEYS[1], 'mode', 'read'); ",
    "redis.call('hset', KEYS[1], ARGV[2], 1); ",
    "redis.call('set', KEYS[2] .. ':1', 1); ",
    "redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); ",
    "redis.call('pexpire', KEYS[1], ARGV[1]); ",
    "return nil; ",
    "end; ",
    "if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then ",
    "local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); ",
    "local key = KEYS[2] .. ':' .. ind;",
    "redis.call('set', key, 1); ",
    "redis.call('pexpire', key, ARGV[1]); ",
    "local remainTime = redis.call('pttl', KEYS[1]); ",
    "redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); ",
    "return nil; ",
    "end;",
    "return redis.call('pttl', KEYS[1]);"
);

/// `RedissonReadLock.unlockInnerAsync`. KEYS: name, `redisson_rwlock:{name}`, the timeout prefix,
/// `{name}`, the unlock latch; ARGV: `0`, lockName, publish command, latch timeout ms.
pub const READ_LOCK_UNLOCK: &str = concat!(
    "local val = redis.call('get', KEYS[5]); ",
    "if val ~= false then ",
    "return tonumber(val);",
    "end; ",
    "local mode = redis.call('hget', KEYS[1], 'mode'); ",
    "if (mode == false) then ",
    "redis.call(ARGV[3], KEYS[2], ARGV[1]); ",
    "redis.call('set', KEYS[5], 1, 'px', ARGV[4]); ",
    "return nil; ",
    "end; ",
    "local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); ",
    "if (lockExists == 0) then ",
    "return nil;",
    "end; ",
    "local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); ",
    "if (counter == 0) then ",
    "redis.call('hdel', KEYS[1], ARGV[2]); ",
    "end;",
    "redis.call('del', KEYS[3] .. ':' .. (counter+1)); ",
    "if (redis.call('hlen', KEYS[1]) > 1) then ",
    "local maxRemainTime = -3; ",
    "local keys = redis.call('hkeys', KEYS[1]); ",
    "for n, key in ipairs(keys) do ",
    "counter = tonumber(redis.call('hget', KEYS[1], key)); ",
    "if type(counter) == 'number' then ",
    "for i=counter, 1, -1 do ",
    "local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i); ",
    "maxRemainTime = math.max(remainTime, maxRemainTime);",
    "end; ",
    "end; ",
    "end; ",
    "if maxRemainTime > 0 then ",
    "redis.call('pexpire', KEYS[1], maxRemainTime); ",
    "redis.call('set', KEYS[5], 0, 'px', ARGV[4]); ",
    "return 0; ",
    "end;",
    "if mode == 'write' then ",
    "redis.call('set', KEYS[5], 0, 'px', ARGV[4]); ",
    "return 0;",
    "end; ",
    "end; ",
    "redis.call('del', KEYS[1]); ",
    "redis.call(ARGV[3], KEYS[2], ARGV[1]); ",
    "redis.call('set', KEYS[5], 1, 'px', ARGV[4]); ",
    "return 1; "
);

/// `ReadLockTask` (4.4.0+), one lock per KEYS pair: name, `{name}`; ARGV: the watchdog
/// timeout ms, then per pair the number of lockNames and the lockNames.
pub const READ_LOCK_RENEW: &str = concat!(
    "local result = {} ",
    "local argIdx = 2 ",
    "for i = 1, #KEYS, 2 do ",
    "local anyAlive = false; ",
    "local lockNamesCount = tonumber(ARGV[argIdx]); ",
    "argIdx = argIdx + 1; ",
    "for k = 1, lockNamesCount do ",
    "local counter = redis.call('hget', KEYS[i], ARGV[argIdx]); ",
    "if (counter ~= false) then ",
    "anyAlive = true; ",
    "for c=counter, 1, -1 do ",
    "redis.call('pexpire', KEYS[i+1] .. ':' .. ARGV[argIdx] .. ':rwlock_timeout:' .. c, ARGV[1]); ",
    "end; ",
    "end; ",
    "argIdx = argIdx + 1; ",
    "end; ",
    "if (anyAlive) then ",
    "redis.call('pexpire', KEYS[i], ARGV[1]); ",
    "table.insert(result, 1); ",
    "else ",
    "table.insert(result, 0); ",
    "end; ",
    "end; ",
    "return result;"
);

/// `RedissonFairLock.tryLockInnerAsync` (EVAL_LONG: a waiting acquire). KEYS: name, queue,
/// deadlines; ARGV: lease ms, lockName, wait ms, now ms. Reply: nil when acquired, else a TTL.
pub const FAIR_ACQUIRE: &str = concat!(
    "while true do ",
    "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);",
    "if firstThreadId2 == false then ",
    "break;",
    "end;",
    "local timeout = redis.call('zscore', KEYS[3], firstThreadId2);",
    "if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then ",
    "redis.call('zrem', KEYS[3], firstThreadId2);",
    "redis.call('lpop', KEYS[2]);",
    "else ",
    "break;",
    "end;",
    "end;",
    "if (redis.call('exists', KEYS[1]) == 0) ",
    "and ((redis.call('exists', KEYS[2]) == 0) ",
    "or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then ",
    "redis.call('lpop', KEYS[2]);",
    "redis.call('zrem', KEYS[3], ARGV[2]);",
    "local keys = redis.call('zrange', KEYS[3], 0, -1);",
    "for i = 1, #keys, 1 do ",
    "redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]);",
    "end;",
    "redis.call('hset', KEYS[1], ARGV[2], 1);",
    "redis.call('pexpire', KEYS[1], ARGV[1]);",
    "return nil;",
    "end;",
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then ",
    "redis.call('hincrby', KEYS[1], ARGV[2],1);",
    "redis.call('pexpire', KEYS[1], ARGV[1]);",
    "return nil;",
    "end;",
    "local timeout = redis.call('zscore', KEYS[3], ARGV[2]);",
    "if timeout ~= false then ",
    "local ttl = redis.call('pttl', KEYS[1]);",
    "return math.max(0, ttl); ",
    "end;",
    "local lastThreadId = redis.call('lindex', KEYS[2], -1);",
    "local ttl;",
    "if lastThreadId ~= false and lastThreadId ~= ARGV[2] and redis.call('zscore', KEYS[3], lastThreadId) ~= false then ",
    "ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]);",
    "else ",
    "ttl = redis.call('pttl', KEYS[1]);",
    "end;",
    "local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);",
    "if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then ",
    "redis.call('rpush', KEYS[2], ARGV[2]);",
    "end;",
    "return ttl;"
);

/// `RedissonFairLock.unlockInnerAsync`. KEYS: name, queue, deadlines, `redisson_lock__channel:{name}`,
/// the unlock latch; ARGV: `0`, lease ms, lockName, now ms, publish command, latch timeout ms.
pub const FAIR_UNLOCK: &str = concat!(
    "local val = redis.call('get', KEYS[5]); ",
    "if val ~= false then ",
    "return tonumber(val);",
    "end; ",
    "while true do ",
    "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);",
    "if firstThreadId2 == false then ",
    "break;",
    "end; ",
    "local timeout = redis.call('zscore', KEYS[3], firstThreadId2);",
    "if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then ",
    "redis.call('zrem', KEYS[3], firstThreadId2); ",
    "redis.call('lpop', KEYS[2]); ",
    "else ",
    "break;",
    "end; ",
    "end;",
    "if (redis.call('exists', KEYS[1]) == 0) then ",
    "local nextThreadId = redis.call('lindex', KEYS[2], 0); ",
    "if nextThreadId ~= false then ",
    "redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); ",
    "end; ",
    "redis.call('set', KEYS[5], 1, 'px', ARGV[6]); ",
    "return 1; ",
    "end;",
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then ",
    "return nil;",
    "end; ",
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); ",
    "if (counter > 0) then ",
    "redis.call('pexpire', KEYS[1], ARGV[2]); ",
    "redis.call('set', KEYS[5], 0, 'px', ARGV[6]); ",
    "return 0; ",
    "end; ",
    "redis.call('del', KEYS[1]); ",
    "redis.call('set', KEYS[5], 1, 'px', ARGV[6]); ",
    "local nextThreadId = redis.call('lindex', KEYS[2], 0); ",
    "if nextThreadId ~= false then ",
    "redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); ",
    "end; ",
    "return 1; "
);

/// `RedissonFairLock.forceUnlockAsync`. KEYS: name, queue, deadlines,
/// `redisson_lock__channel:{name}`; ARGV: `0`, now ms, publish command.
pub const FAIR_FORCE_UNLOCK: &str = concat!(
    "while true do ",
    "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);",
    "if firstThreadId2 == false then ",
    "break;",
    "end; ",
    "local timeout = redis.call('zscore', KEYS[3], firstThreadId2);",
    "if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[2]) then ",
    "redis.call('zrem', KEYS[3], firstThreadId2); ",
    "redis.call('lpop', KEYS[2]); ",
    "else ",
    "break;",
    "end; ",
    "end;",
    "if (redis.call('del', KEYS[1]) == 1) then ",
    "local nextThreadId = redis.call('lindex', KEYS[2], 0); ",
    "if nextThreadId ~= false then ",
    "redis.call(ARGV[3], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); ",
    "end; ",
    "return 1; ",
    "end; ",
    "return 0;"
);

/// `RedissonFairLock.acquireFailedAsync` (a waiter gives up). KEYS: queue, deadlines;
/// ARGV: lockName, wait ms.
pub const FAIR_ACQUIRE_FAILED: &str = concat!(
    "local queue = redis.call('lrange', KEYS[1], 0, -1);",
    "local i = 1;",
    "while i <= #queue and queue[i] ~= ARGV[1] do ",
    "i = i + 1;",
    "end;",
    "i = i + 1;",
    "while i <= #queue do ",
    "redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i]);",
    "i = i + 1;",
    "end;",
    "redis.call('zrem', KEYS[2], ARGV[1]);",
    "redis.call('lrem', KEYS[1], 0, ARGV[1]);"
);

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
    Script::new(FAIR_ACQUIRE)
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
    let reply = Script::new(FAIR_UNLOCK)
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
    let reply: Option<i64> = Script::new(FAIR_FORCE_UNLOCK)
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
