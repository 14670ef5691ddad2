-- Permit semaphore: give back the permits of one grant (protocol.md). After permit_reclaim.lua.
-- ARGV[2]: the ids, 16 bytes each, concatenated.
-- Expired permits are reclaimed first, so an expired id counts as not held. Every id still held
-- is removed; the free count goes up by their number and the new free count is published, as
-- Redisson's release of one id does (Java waiters read it as permits to wake for).
-- Reply: {released}, how many of the ids were still held.
counter(KEYS[1])
reclaim(nil)
local released = 0
for i = 1, #ARGV[2], 16 do
    released = released + redis.call('zrem', KEYS[2], string.sub(ARGV[2], i, i + 15))
end
if released > 0 then
    local free = redis.call('incrby', KEYS[1], released)
    redis.call(ARGV[1], KEYS[3], free)
end
return {released}
