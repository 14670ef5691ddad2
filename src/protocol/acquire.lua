-- Reentrant lock: acquire (protocol.md, "Reentrant lock").
-- KEYS[1]: the lock hash.
-- ARGV[1]: lease in ms; ARGV[2]: holder ("<client id>:<n>"); ARGV[3]: the holder's count the
-- client expects before this request (protocol.md, "Sent again").
-- Reply: {count} when acquired (the holder's count, incremented, PTTL set to the lease: 1 is a
--        new hold, more a re-entry); otherwise the key's PTTL in ms (what the current holder
--        still has).
-- Reply {0} (lockman): the request re-enters a hold (ARGV[3] > 0) whose field is gone; nothing
-- is taken, and the client counts that hold lost before it asks again as a new hold (a
-- re-entry never creates the field: a request sent again could not tell its own new field
-- from the count it expected).
-- With a lock-delay (lockman's own, protocol.md "Lock-delay"): KEYS[2] is the name's delay key
-- and ARGV[4] the delay in ms. A grant sets the delay key to outlive the hold by the delay; while
-- the lock is free but its delay key lives (a hold ended without a release), the reply is the
-- delay key's PTTL, as if held.
-- A key of another type raises WRONGTYPE from HEXISTS and is left as it is; so does a read-write
-- lock's hash (its `mode` field), whose readers this hold would otherwise join.
local delay = tonumber(ARGV[4])
local function delay_set()
    if delay then
        redis.call('set', KEYS[2], ARGV[2], 'px', tonumber(ARGV[1]) + delay)
    end
end
local function grant()
    local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    delay_set()
    return {count}
end
local expect = tonumber(ARGV[3])
if redis.call('exists', KEYS[1]) == 0 then
    if expect > 0 then
        return {0}
    end
    if delay then
        local left = redis.call('pttl', KEYS[2])
        if left > 0 then
            return left
        end
    end
    return grant()
end
if redis.call('hexists', KEYS[1], 'mode') == 1 then
    return redis.error_reply('WRONGTYPE Operation against a lock of another kind')
end
local held = redis.call('hget', KEYS[1], ARGV[2])
local count = tonumber(held)
if count == expect + 1 then
    -- Sent again: its first run took this hold. Replied as then; only the lease is set again.
    redis.call('pexpire', KEYS[1], ARGV[1])
    delay_set()
    return {count}
end
if held then
    -- (A count that is not an integer makes HINCRBY raise Redis's error, changing nothing.)
    return grant()
end
if expect > 0 then
    return {0}
end
return redis.call('pttl', KEYS[1])
