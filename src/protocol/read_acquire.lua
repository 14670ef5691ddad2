-- Read-write lock, read side: acquire (protocol.md, "Read-write lock").
-- KEYS[1]: the lock hash; KEYS[2]: this holder's timeout-key prefix ("{name}:<holder>:rwlock_timeout").
-- ARGV[1]: lease in ms; ARGV[2]: holder; ARGV[3]: the holder's write field ("<holder>:write");
-- ARGV[4]: the holder's read count the client expects before this request (protocol.md, "Sent
-- again").
-- Reply {0} (lockman): the request re-enters a hold (ARGV[4] > 0) whose field is gone; nothing
-- is taken, and the client counts that hold lost before it asks again as a new hold (a
-- re-entry never creates the field: a request sent again could not tell its own new field
-- from the count it expected).
-- Allowed with no mode, in read mode, or in write mode held by this holder (downgrade).
-- Reply: {i} when acquired (the holder's read count i, 1 for a new hold; timeout key ":<i>" with
--        the lease, hash PTTL the longest);
--        otherwise the key's PTTL in ms.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false and redis.call('exists', KEYS[1]) == 1 then
    -- A hash without `mode`: a reentrant, fenced or fair lock. Another kind of lock, whose
    -- holder this one would otherwise join: WRONGTYPE, and it is left as it is.
    return redis.error_reply('WRONGTYPE Operation against a lock of another kind')
end
local expect = tonumber(ARGV[4])
if mode == false then
    if expect > 0 then
        return {0}
    end
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':1', 1, 'px', ARGV[1])
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1}
end
local function lease(i)
    redis.call('set', KEYS[2] .. ':' .. i, 1, 'px', ARGV[1])
    local remaining = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(remaining, tonumber(ARGV[1])))
    return {i}
end
local held = redis.call('hget', KEYS[1], ARGV[2])
local count = tonumber(held)
if count == expect + 1 then
    -- Sent again: its first run took this hold. Replied as then; only the leases (its timeout
    -- key's and the hash's) are set again.
    return lease(count)
end
if held == false and expect > 0 then
    return {0}
end
if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
    return lease(redis.call('hincrby', KEYS[1], ARGV[2], 1))
end
return redis.call('pttl', KEYS[1])
