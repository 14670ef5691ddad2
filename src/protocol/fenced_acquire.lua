-- Fenced lock: acquire (protocol.md, "Fenced lock"): the reentrant acquire, plus a token.
-- KEYS[1]: the lock hash; KEYS[2]: the token counter.
-- ARGV[1]: lease in ms; ARGV[2]: holder; ARGV[3]: the holder's count the client expects before
-- this request (protocol.md, "Sent again").
-- Reply: {token, count} when acquired (re-entry included): the counter, incremented in this
--        call (fence_token.lua), so greater than every token handed out before, and the holder's
--        count (1: a new hold); otherwise the key's PTTL in ms.
-- Reply {0} (lockman): the request re-enters a hold (ARGV[3] > 0) whose field is gone; nothing
-- is taken, and the client counts that hold lost before it asks again as a new hold (a
-- re-entry never creates the field: a request sent again could not tell its own new field
-- from the count it expected).
-- A read-write lock's hash (its `mode` field) is another kind of lock: WRONGTYPE, left as it is.
-- The token first: a counter of another type raises WRONGTYPE before anything is written.
local function grant()
    local token = next_token(KEYS[2])
    local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {token, count}
end
local expect = tonumber(ARGV[3])
if redis.call('exists', KEYS[1]) == 0 then
    if expect > 0 then
        return {0}
    end
    return grant()
end
if redis.call('hexists', KEYS[1], 'mode') == 1 then
    return redis.error_reply('WRONGTYPE Operation against a lock of another kind')
end
local held = redis.call('hget', KEYS[1], ARGV[2])
local count = tonumber(held)
if count == expect + 1 then
    -- Sent again: its first run took this hold and the counter's token, which nobody else can
    -- have taken since (the lock is this holder's). Replied as then; only the lease is set
    -- again. A counter lost meanwhile gives a new token.
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {tonumber(redis.call('get', KEYS[2])) or next_token(KEYS[2]), count}
end
if held then
    -- (A count that is not an integer makes HINCRBY raise Redis's error, changing nothing.)
    return grant()
end
if expect > 0 then
    return {0}
end
return redis.call('pttl', KEYS[1])
