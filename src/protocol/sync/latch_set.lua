-- Count-down latch: set the count of a latch that is open (protocol.md, "Count-down latch"), as
-- RCountDownLatch's trySetCount. KEYS[1]: the latch; KEYS[2]: its channel. ARGV[1]: the count
-- (at least 1); ARGV[2]: the publish command.
-- Reply: {1} when set (publishes "1": a new count), {0} when a count is already set.
if counter(KEYS[1]) then
    return {0}
end
redis.call('set', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], '1')
return {1}
