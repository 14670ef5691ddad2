-- Semaphore and permit semaphore: take every free permit (protocol.md), as drainPermits.
-- KEYS[1]: the semaphore. Reply: {taken}, how many were free; the key is left at 0 (a missing
-- key stays missing). Nothing is published. A permit semaphore reclaims expired permits first.
local free = counter(KEYS[1])
if not free then
    return {0}
end
redis.call('set', KEYS[1], '0')
return {free}
