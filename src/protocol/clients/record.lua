-- A manager's client record (docs/protocol.md, "Client records"): replaces the record's hash
-- with the fields given, stamps it with the server's time, lets it expire after the TTL, and
-- keeps the client in the index, scored by when its record expires; drops index entries of
-- records that have expired.
-- KEYS[1] the record, KEYS[2] the index.
-- ARGV[1] the TTL (ms), ARGV[2] the client id, ARGV[3..] field, value, field, value, ...
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
redis.call('DEL', KEYS[1])
for i = 3, #ARGV - 1, 2 do
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[1], 'seen', now)
-- PEXPIREAT, not PEXPIRE: a record write is never counted as a lock's renewal.
redis.call('PEXPIREAT', KEYS[1], now + ttl)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('PTTL', KEYS[2]) < ttl then
    redis.call('PEXPIREAT', KEYS[2], now + ttl)
end
return now
