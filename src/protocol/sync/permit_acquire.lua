-- Permit semaphore: take permits, each under its own id (protocol.md), as
-- RPermitExpirableSemaphore's tryAcquire. After permit_reclaim.lua.
-- ARGV[2]: how many (n >= 1); ARGV[3]: the lease in ms; ARGV[4]: the n ids, 16 bytes each,
-- concatenated.
-- Reply: {1} when taken: the free count is DECRBY n, each id is added with score now + lease,
-- and the main key's PTTL, if it has one, is copied to the set. Otherwise {0, free, wait}: wait
-- is how long until the permit held longest expires (ms), or -1 when it has no lease (Redisson's
-- NO_LEASE) or none is held: a waiter tries again by then even without a message.
counter(KEYS[1])
local n = tonumber(ARGV[2])
reclaim(n)
local free = counter(KEYS[1]) or 0
if free >= n then
    redis.call('decrby', KEYS[1], n)
    local score = now + tonumber(ARGV[3])
    for i = 1, #ARGV[4], 16 do
        redis.call('zadd', KEYS[2], score, string.sub(ARGV[4], i, i + 15))
    end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl)
    end
    return {1}
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
local score = tonumber(first[2])
if score and score ~= NO_LEASE then
    return {0, free, math.max(score - now, 0)}
end
return {0, free, -1}
