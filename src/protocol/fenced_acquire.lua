-- Fenced lock: acquire (protocol.md, "Fenced lock"): the reentrant acquire, plus a token.
-- KEYS[1]: the lock hash; KEYS[2]: the token counter.
-- ARGV[1]: lease in ms; ARGV[2]: holder.
-- Reply: {token, count} when acquired (re-entry included): the counter, incremented in this
--        call (fence_token.lua), so greater than every token handed out before, and the holder's
--        count (1: a new hold); otherwise the key's PTTL in ms.
-- A read-write lock's hash (its `mode` field) is another kind of lock: WRONGTYPE, left as it is.
-- The token first: a counter of another type raises WRONGTYPE before anything is written.
local function grant()
    local token = next_token(KEYS[2])
    local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {token, count}
end
if redis.call('exists', KEYS[1]) == 0 then
    return grant()
end
if redis.call('hexists', KEYS[1], 'mode') == 1 then
    return redis.error_reply('WRONGTYPE Operation against a lock of another kind')
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return grant()
end
return redis.call('pttl', KEYS[1])
