//! The Java side, played by a raw client: Redisson's synchronizer operations written from the
//! wire semantics (keys, values, messages) that docs/protocol.md states, as an independent
//! Redisson-compatible client would run them. Nothing here uses lockman's scripts; in
//! particular expiry uses this client's own clock, as Java's does.

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
