-- Non-reentrant lock: acquire (protocol.md, "Non-reentrant locks"), as Redisson 4.4's
-- RedissonNonReentrantLock: the reentrant lock's keys, field and channel, but a holder that
-- already holds the lock is refused with the error reply NON_REENTRANT_REACQUIRE (Java throws
-- IllegalMonitorStateException; lockman answers LockError::AlreadyHeld) and nothing changes.
-- KEYS[1]: the lock hash.
-- ARGV[1]: lease in ms; ARGV[2]: holder ("<client id>:<n>").
-- Reply: {1} when acquired (the holder's count, always 1, PTTL set to the lease); otherwise the
--        key's PTTL in ms (what the current holder still has).
-- A key of another type raises WRONGTYPE from HEXISTS and is left as it is; so does a read-write
-- lock's hash (its `mode` field).
if redis.call('exists', KEYS[1]) == 0 then
    local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {count}
end
if redis.call('hexists', KEYS[1], 'mode') == 1 then
    return redis.error_reply('WRONGTYPE Operation against a lock of another kind')
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return redis.error_reply('NON_REENTRANT_REACQUIRE')
end
return redis.call('pttl', KEYS[1])
