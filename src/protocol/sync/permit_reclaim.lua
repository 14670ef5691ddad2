-- Permit semaphore (protocol.md, "Permit semaphore"): the clock, and the lazy reclaim of expired
-- permits, before the script that follows.
-- KEYS[1]: the free permits; KEYS[2]: the held permits, a sorted set (member: a permit's 16-byte
-- id; score: its expiry in epoch ms, or NO_LEASE); KEYS[3]: the channel. ARGV[1]: the publish
-- command.
-- `now` is the Redis server's clock, not the client's: every lockman client judges expiry by the
-- same clock. Java clients send their own; the skew between the two moves expiry (protocol.md).
local NO_LEASE = 922337203685477
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
-- reclaim(limit): expired permits (score <= now), at most `limit` of them (nil: all), go back to
-- the free count, which is published when it is then positive.
local function reclaim(limit)
    local expired
    if limit then
        expired = redis.call('zrangebyscore', KEYS[2], '-inf', now, 'limit', 0, limit)
    else
        expired = redis.call('zrangebyscore', KEYS[2], '-inf', now)
    end
    if #expired == 0 then
        return
    end
    for _, id in ipairs(expired) do
        redis.call('zrem', KEYS[2], id)
    end
    local free = redis.call('incrby', KEYS[1], #expired)
    if free > 0 then
        redis.call(ARGV[1], KEYS[3], free)
    end
end
