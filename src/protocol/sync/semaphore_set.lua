-- Semaphore and permit semaphore: set the permits of a semaphore that has none (protocol.md),
-- as trySetPermits. KEYS[1]: the semaphore; KEYS[2]: its channel. ARGV[1]: the permits;
-- ARGV[2]: the publish command; ARGV[3]: a time to live in ms for the key, or 0 for none (a
-- semaphore's trySetPermits(permits, ttl), Redisson 3.29+: `SET … PX ttl`).
-- Reply: {1} when set (the count is published), {0} when the key exists (nothing changes).
if counter(KEYS[1]) then
    return {0}
end
if tonumber(ARGV[3]) > 0 then
    redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[3])
else
    redis.call('set', KEYS[1], ARGV[1])
end
redis.call(ARGV[2], KEYS[2], ARGV[1])
return {1}
