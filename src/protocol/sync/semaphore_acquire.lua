-- Semaphore: take permits (protocol.md, "Semaphore"), as RSemaphore's tryAcquire.
-- KEYS[1]: the semaphore, its free permits. ARGV[1]: how many (at least 1).
-- Reply: {1} when taken (DECRBY); {0, free} when fewer are free (a missing key has none).
local free = counter(KEYS[1]) or 0
local n = tonumber(ARGV[1])
if free >= n then
    redis.call('decrby', KEYS[1], n)
    return {1}
end
return {0, free}
