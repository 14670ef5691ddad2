-- Permit semaphore: how long one permit has left (protocol.md), as
-- RPermitExpirableSemaphore's getLeaseTime (Redisson 3.41+). After permit_reclaim.lua.
-- ARGV[2]: the permit's 16-byte id.
-- Every expired permit is reclaimed first, so an expired id counts as not held.
-- Reply: {ms} left until it expires (by the server's clock), {-1} for a permit without a lease
-- (score NO_LEASE), {0} when the id is not held. Redisson's reply, with the same meanings.
counter(KEYS[1])
reclaim(nil)
local score = redis.call('zscore', KEYS[2], ARGV[2])
if not score then
    return {0}
end
score = tonumber(score)
if score == NO_LEASE then
    return {-1}
end
return {score - now}
