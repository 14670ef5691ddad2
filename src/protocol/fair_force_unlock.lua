-- Fair lock: force unlock, whoever holds it (protocol.md, "Fair lock"), as Redisson's
-- RedissonFairLock.forceUnlockAsync: the queue's stale heads are dropped first (fair_prune.lua,
-- joined in front when the crate is built), then the hash is deleted and the head woken on its
-- own channel, the only one a fair waiter listens on.
-- KEYS[1]: the lock hash; KEYS[2]: the queue; KEYS[3]: the deadlines;
-- KEYS[4]: the channel prefix ("redisson_lock__channel:{name}"; the head's is ":<holder>" more).
-- ARGV[1]: the unlock message ("0"); ARGV[2]: unused (force_unlock.lua's mode, which a fair lock
-- has none of); ARGV[3]: the publish command. (`now` is the server's clock: fair_prune.lua.)
-- Reply: 1 when the key was deleted (and the head, if any, woken); 0 when there was no key (the
-- new head is woken then only when the prune dropped the one before: lockman, protocol.md).
-- A lock key of another type is not a lock: it is left alone and WRONGTYPE is raised (after the
-- prune, which only drops waiters whose deadline has passed).
local kind = redis.call('type', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
local deleted = redis.call('del', KEYS[1]) == 1
if deleted or pruned then
    local head = redis.call('lindex', KEYS[2], 0)
    if head ~= false then
        redis.call(ARGV[3], KEYS[4] .. ':' .. head, ARGV[1])
    end
end
if deleted then
    return 1
end
return 0
