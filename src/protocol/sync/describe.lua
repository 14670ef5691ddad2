-- Synchronizers: everything about one, read without changing anything (`lockman inspect`).
-- KEYS[1]: the main key (a semaphore's free permits, a latch's count); KEYS[2]: a permit
-- semaphore's held permits.
-- Reply: {type of KEYS[1], its value or false, its PTTL, the held permits as id, score pairs,
-- the server's clock in epoch ms}.
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local kind = redis.call('type', KEYS[1])['ok']
local value = false
if kind == 'string' then
    value = redis.call('get', KEYS[1])
end
local held = {}
if redis.call('type', KEYS[2])['ok'] == 'zset' then
    held = redis.call('zrange', KEYS[2], 0, -1, 'withscores')
end
return {kind, value, redis.call('pttl', KEYS[1]), held, now}
