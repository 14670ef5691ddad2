-- Reentrant or fenced lock: release one hold and, when that frees the lock, grant it to the next
-- local waiter in the same call (docs/protocol.md, "Local hand-off"). Nothing is published: the
-- lock never becomes free, and other processes' waiters see an ordinary lock hash, held by the
-- new holder, with its lease as PTTL.
-- KEYS[1]: the lock hash; KEYS[2] (fenced lock only): the token counter.
-- ARGV[1]: the releasing holder's lease in ms (restored when holds remain); ARGV[2]: the
-- releasing holder; ARGV[3]: the new holder; ARGV[4]: the new holder's lease in ms.
-- Reply: nil when the releasing holder has no field (nothing changes); 0 when its holds remain;
--        {1} when handed off, {1, token} for a fenced lock (the counter, incremented).
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
local count = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if count > 0 then
    redis.call('pexpire', KEYS[1], ARGV[1])
    return 0
end
redis.call('hdel', KEYS[1], ARGV[2])
redis.call('hincrby', KEYS[1], ARGV[3], 1)
redis.call('pexpire', KEYS[1], ARGV[4])
if KEYS[2] then
    return {1, redis.call('incr', KEYS[2])}
end
return {1}
