-- Reentrant lock with a lock-delay: open a name its delay key closes while nobody holds it
-- (protocol.md, "Lock-delay"; `LockManager::clear_lock_delay`, `lockman unlock --force`).
-- KEYS[1]: the lock hash; KEYS[2]: its delay key; KEYS[3]: the unlock channel.
-- ARGV[1]: the unlock message ("0"); ARGV[2]: the publish command ("publish" or "spublish").
-- Reply: the delay key's PTTL in ms (0 for one without expiry) when it was deleted; the unlock
--        message is then published, so that lockman's waiters held back by the delay try at
--        once. -2 when there is no delay key (not a string), or when the lock hash exists: a
--        holder's delay key is its own, and is left.
if redis.call('exists', KEYS[1]) == 1 then
    return -2
end
if redis.call('type', KEYS[2])['ok'] ~= 'string' then
    return -2
end
local left = redis.call('pttl', KEYS[2])
redis.call('del', KEYS[2])
redis.call(ARGV[2], KEYS[3], ARGV[1])
return math.max(left, 0)
