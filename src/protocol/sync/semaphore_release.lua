-- Semaphore: give permits back (protocol.md, "Semaphore"), as RSemaphore's release.
-- KEYS[1]: the semaphore; KEYS[2]: its channel. ARGV[1]: how many; ARGV[2]: the publish command.
-- Reply: {free}, the new free count, which is also what is published (Java's waiters read it).
counter(KEYS[1])
local free = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], free)
return {free}
