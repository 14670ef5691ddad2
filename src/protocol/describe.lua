-- Any lock: everything Redis holds about it, changing nothing (`LockManager::describe`, the
-- `lockman inspect` command).
-- KEYS[1]: the lock hash; KEYS[2]: the fair queue; KEYS[3]: the fair deadlines; KEYS[4]: the
-- fenced token counter; KEYS[5] (left out by a user who may not read `lockman_delay:*`): the
-- reentrant lock's delay key.
-- Reply: {the hash's fields and values (flat), its PTTL in ms (-2 when there is no hash), the
--         queue (oldest first), the deadlines (flat: waiter, ms), the token counter (false when
--         absent)}. A key of another type where the hash should be is no lock: WRONGTYPE. Other
--         keys of an unexpected type are read as absent; the server's clock in epoch ms, which
--         the fair deadlines of lockman's waiters are set by; the delay key's PTTL in ms (-2
--         when it is absent or not a string, or KEYS[5] is not given).
local kind = redis.call('type', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
local fields = {}
if kind == 'hash' then
    fields = redis.call('hgetall', KEYS[1])
end
local queue = {}
if redis.call('type', KEYS[2])['ok'] == 'list' then
    queue = redis.call('lrange', KEYS[2], 0, -1)
end
local deadlines = {}
if redis.call('type', KEYS[3])['ok'] == 'zset' then
    deadlines = redis.call('zrange', KEYS[3], 0, -1, 'withscores')
end
local token = false
if redis.call('type', KEYS[4])['ok'] == 'string' then
    token = redis.call('get', KEYS[4])
end
local delay = -2
if KEYS[5] and redis.call('type', KEYS[5])['ok'] == 'string' then
    delay = redis.call('pttl', KEYS[5])
end
local now = redis.call('time')
return {fields, redis.call('pttl', KEYS[1]), queue, deadlines, token,
        tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000), delay}
