-- Fenced lock: acquire (protocol.md, "Fenced lock"): the reentrant acquire, plus a token.
-- KEYS[1]: the lock hash; KEYS[2]: the token counter.
-- ARGV[1]: lease in ms; ARGV[2]: holder.
-- Reply: {token} when acquired (re-entry included): the counter, incremented in this call, so
--        greater than every token handed out before; otherwise the key's PTTL in ms.
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {redis.call('incr', KEYS[2])}
end
return redis.call('pttl', KEYS[1])
