-- Permit semaphore: give back a list of permits all at once or not at all (protocol.md), as
-- RPermitExpirableSemaphore's tryRelease(List) (Redisson 3.41+). After permit_reclaim.lua.
-- ARGV[2]: the ids, 16 bytes each, concatenated.
-- When any id is not held, or has expired, nothing changes and the reply is {0}. Otherwise every
-- expired permit is reclaimed (as the other scripts do), the ids leave the set, the free count
-- goes up by their number, and **that number** is published (not the new free count: Redisson
-- publishes the number released here).
-- Reply: {released}.
counter(KEYS[1])
for i = 1, #ARGV[2], 16 do
    local score = redis.call('zscore', KEYS[2], string.sub(ARGV[2], i, i + 15))
    if not score or tonumber(score) <= now then
        return {0}
    end
end
reclaim(nil)
local released = 0
for i = 1, #ARGV[2], 16 do
    released = released + redis.call('zrem', KEYS[2], string.sub(ARGV[2], i, i + 15))
end
redis.call('incrby', KEYS[1], released)
redis.call(ARGV[1], KEYS[3], released)
return {released}
