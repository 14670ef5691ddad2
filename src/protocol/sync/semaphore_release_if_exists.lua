-- Semaphore: give permits back only to a semaphore that exists (protocol.md, "Semaphore"), as
-- RSemaphore's releaseIfExists (Redisson 4.0+): a missing key stays missing, so a semaphore
-- deleted (or expired) meanwhile is not brought back by a late release.
-- KEYS[1]: the semaphore; KEYS[2]: its channel. ARGV[1]: how many; ARGV[2]: the publish command.
-- Reply: {1} when given back (INCRBY, the new free count published), {0} when the key is missing.
if not counter(KEYS[1]) then
    return {0}
end
local free = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], free)
return {1}
