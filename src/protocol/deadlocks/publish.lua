-- A manager's long waits, for deadlock detection across processes (docs/protocol.md, "Waits
-- for deadlock detection"): replaces the hash with one field per owner whose wait has lasted
-- past the threshold, each stamped with when that wait began by the server's clock, and lets
-- it expire after the TTL. With no field given, the hash is deleted.
-- KEYS[1] the hash. ARGV[1] the TTL (ms), ARGV[2..] owner, waited ms, entry, owner, ...
-- Reply: the server's time (epoch ms).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('DEL', KEYS[1])
for i = 2, #ARGV - 2, 3 do
    redis.call('HSET', KEYS[1], ARGV[i], (now - tonumber(ARGV[i + 1])) .. '\n' .. ARGV[i + 2])
end
if #ARGV > 1 then
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]))
end
return now
