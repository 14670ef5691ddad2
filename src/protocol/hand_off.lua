-- Reentrant or fenced lock: release one hold and, when that frees the lock, grant it to the next
-- local waiter in the same call (docs/protocol.md, "Local hand-off"), after fence_token.lua,
-- hand_off_again.lua and release_prologue.lua.
-- Nothing is published: the lock never becomes free, and other processes' waiters see an
-- ordinary lock hash, held by the new holder, with its lease as PTTL.
-- KEYS[1]: the lock hash; KEYS[2]: the token counter (read only for a fenced lock).
-- ARGV[1]: unused (the unlock message's place in release.lua); ARGV[2]: the releasing holder's
-- lease in ms (restored when holds remain); ARGV[3]: the releasing holder; ARGV[4]: the new
-- holder; ARGV[5]: the releasing holder's count the client expects before this request;
-- ARGV[6]: the new holder's lease in ms; ARGV[7]: "1" for a fenced lock; ARGV[8]: the new
-- holder's count the client expects before this request.
-- KEYS[3] and ARGV[9] (with a lock-delay, reentrant locks): the delay key and the delay in ms;
-- the delay key then outlives the new holder's lease by the delay.
-- Reply: nil or 0 from the prologue; {1} when handed off, {1, token} for a fenced lock (the
--        counter, incremented by fence_token.lua).
redis.call('hdel', KEYS[1], ARGV[3])
redis.call('hincrby', KEYS[1], ARGV[4], 1)
redis.call('pexpire', KEYS[1], ARGV[6])
if KEYS[3] then
    redis.call('set', KEYS[3], ARGV[4], 'px', tonumber(ARGV[6]) + tonumber(ARGV[9]))
end
if ARGV[7] == '1' then
    return {1, next_token(KEYS[2])}
end
return {1}
