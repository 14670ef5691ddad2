-- Semaphore and permit semaphore: add (or with a negative delta, remove) permits (protocol.md),
-- as addPermits. KEYS[1]: the semaphore; KEYS[2]: its channel. ARGV[1]: the delta; ARGV[2]: the
-- publish command; ARGV[3]: "s" for a semaphore (publish the new free count), "p" for a permit
-- semaphore (publish the delta, only when positive), as each Redisson class does.
-- Reply: {free}, the new free count. SET drops any TTL, as Redisson's does.
local delta = tonumber(ARGV[1])
local free = (counter(KEYS[1]) or 0) + delta
redis.call('set', KEYS[1], string.format('%.0f', free))
if ARGV[3] == 's' then
    redis.call(ARGV[2], KEYS[2], string.format('%.0f', free))
elseif delta > 0 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
return {free}
