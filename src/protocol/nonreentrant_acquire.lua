-- Non-reentrant lock: acquire (protocol.md, "Non-reentrant locks"), as Redisson 4.4's
-- RedissonNonReentrantLock: the reentrant lock's keys, field and channel, but a holder that
-- already holds the lock is refused with the error reply NON_REENTRANT_REACQUIRE (Java throws
-- IllegalMonitorStateException; lockman answers LockError::AlreadyHeld) and nothing changes.
-- KEYS[1]: the lock hash.
-- ARGV[1]: lease in ms; ARGV[2]: holder ("<client id>:<n>"); ARGV[3]: the holder's count the
-- client expects before this request (protocol.md, "Sent again"): 0, or 1 for a re-entry.
-- Reply: {1} when acquired (the holder's count, always 1, PTTL set to the lease); otherwise the
--        key's PTTL in ms (what the current holder still has).
-- Reply {0} (lockman): a re-entry (ARGV[3] > 0) whose field is gone; nothing is taken, and the
-- client counts that hold lost before it asks again as a new hold.
-- A request sent again that finds its first run's hold (the count it expected, plus one) is
-- answered as then, before the re-entry check: its first run took the lock.
-- A key of another type raises WRONGTYPE from HEXISTS and is left as it is; so does a read-write
-- lock's hash (its `mode` field).
local expect = tonumber(ARGV[3])
if redis.call('exists', KEYS[1]) == 0 then
    if expect > 0 then
        return {0}
    end
    local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {count}
end
if redis.call('hexists', KEYS[1], 'mode') == 1 then
    return redis.error_reply('WRONGTYPE Operation against a lock of another kind')
end
local held = redis.call('hget', KEYS[1], ARGV[2])
if tonumber(held) == expect + 1 then
    -- Sent again: its first run took this hold. Replied as then; only the lease is set again.
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {tonumber(held)}
end
if held then
    return redis.error_reply('NON_REENTRANT_REACQUIRE')
end
if expect > 0 then
    return {0}
end
return redis.call('pttl', KEYS[1])
