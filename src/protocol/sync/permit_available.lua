-- Permit semaphore: reclaim expired permits, then count (protocol.md), as availablePermits and
-- acquiredPermits. After permit_reclaim.lua.
-- Reply: {free, held}.
counter(KEYS[1])
reclaim(nil)
return {counter(KEYS[1]) or 0, redis.call('zcard', KEYS[2])}
