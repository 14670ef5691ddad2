-- Another manager's long waits (publish.lua), changing nothing, and when that manager last
-- wrote them, by the server's clock: each write gives the hash its TTL (ARGV[1], ms), so it was
-- written TTL - PTTL ago. A manager that stopped writing (cut off from Redis, frozen) leaves a
-- hash that says what it waited for then; a reader tells it by this time not moving. (PTTL
-- counts from the command's clock, TIME reads the real one: the same write can read 1 ms
-- apart from one call to the next.)
-- KEYS[1] the hash. ARGV[1] the TTL (ms).
-- Reply: {} when there is none; else the time of its last write (epoch ms; 0 when it has no
-- TTL), then its fields and values, flat.
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then
    return {}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pttl = redis.call('PTTL', KEYS[1])
local written = 0
if pttl >= 0 then
    written = now - tonumber(ARGV[1]) + pttl
end
local reply = redis.call('HGETALL', KEYS[1])
table.insert(reply, 1, written)
return reply
