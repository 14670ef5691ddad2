-- Read-write lock, write side: acquire (protocol.md, "Read-write lock").
-- KEYS[1]: the lock hash. ARGV[1]: lease in ms; ARGV[2]: the write field ("<holder>:write");
-- ARGV[3]: the writer's count the client expects before this request (protocol.md, "Sent
-- again").
-- Reply {0} (lockman): the request re-enters a hold (ARGV[3] > 0) whose field is gone; nothing
-- is taken, and the client counts that hold lost before it asks again as a new hold (a
-- re-entry never creates the field: a request sent again could not tell its own new field
-- from the count it expected).
-- Allowed with no mode, or in write mode held by this holder (re-entry: the lease is added to
-- the remaining PTTL). A reader cannot upgrade.
-- Reply: {count} when acquired (the writer's count: 1 is a new hold); otherwise the key's PTTL in
--        ms.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false and redis.call('exists', KEYS[1]) == 1 then
    -- A hash without `mode`: a reentrant, fenced or fair lock. Another kind of lock, whose
    -- holder this one would otherwise join: WRONGTYPE, and it is left as it is.
    return redis.error_reply('WRONGTYPE Operation against a lock of another kind')
end
local expect = tonumber(ARGV[3])
if mode == false then
    if expect > 0 then
        return {0}
    end
    redis.call('hset', KEYS[1], 'mode', 'write')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1}
end
local held = redis.call('hget', KEYS[1], ARGV[2])
local count = tonumber(held)
if count == expect + 1 then
    -- Sent again: its first run took this hold. Replied as then; the PTTL is made at least the
    -- lease again (never shortened: the first run added the lease to it).
    redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1])))
    return {count}
end
if mode == 'write' and held then
    local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + tonumber(ARGV[1]))
    return {count}
end
if held == false and expect > 0 then
    return {0}
end
return redis.call('pttl', KEYS[1])
