-- Another manager's long waits (publish.lua), changing nothing, and when that manager last
-- wrote them, by the server's clock: each write gives the hash its TTL (ARGV[1], ms), so it was
-- written TTL - PTTL ago. A manager that stopped writing (cut off from Redis, frozen) leaves a
-- hash that says what it waited for then; a reader tells it by this time not moving. (PTTL
-- counts from the command's clock, TIME reads the real one: the same write can read 1 ms
-- apart from one call to the next.)
-- Anyone who may write lockman's keys can forge the hash: one with more than ARGV[2] fields or
-- ARGV[3] bytes (MEMORY USAGE with SAMPLES 0: every field's size summed in place, checked
-- after HLEN, so bounded) is not read, so that no hash makes this call long or its reply large.
-- Where the user may not run MEMORY USAGE, the field count alone bounds the read.
-- KEYS[1] the hash. ARGV[1] the TTL (ms), ARGV[2] the most fields, ARGV[3] the most bytes.
-- Reply: {} when there is none; the status OVERSIZED for a hash over the bounds; else the
-- time of its last write (epoch ms; 0 when it has no TTL), then its fields and values, flat.
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then
    return {}
end
if redis.call('HLEN', KEYS[1]) > tonumber(ARGV[2]) then
    return redis.status_reply('OVERSIZED')
end
local usage = redis.pcall('MEMORY', 'USAGE', KEYS[1], 'SAMPLES', '0')
if type(usage) == 'number' and usage > tonumber(ARGV[3]) then
    return redis.status_reply('OVERSIZED')
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
