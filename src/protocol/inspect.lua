-- Reentrant lock: read its state in one round trip, changing nothing.
-- KEYS[1]: the lock hash. ARGV[1]: a holder.
-- Reply: {exists (0/1), the holder's count (0 when absent), PTTL in ms (-2 when no key)}.
-- A key of another type is not a lock: WRONGTYPE is raised.
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
    return {0, 0, -2}
end
if kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')
return {1, count, redis.call('pttl', KEYS[1])}
