-- Count-down latch: count down once (protocol.md), as RCountDownLatch's countDown.
-- KEYS[1]: the latch; KEYS[2]: its channel. ARGV[1]: the publish command.
-- The count goes down by one; at zero or below the key is deleted, and at exactly zero "0" is
-- published: the latch opened. Reply: {count}, the count after it (0 or less: open).
counter(KEYS[1])
local count = redis.call('decr', KEYS[1])
if count <= 0 then
    redis.call('del', KEYS[1])
end
if count == 0 then
    redis.call(ARGV[1], KEYS[2], '0')
end
return {count}
