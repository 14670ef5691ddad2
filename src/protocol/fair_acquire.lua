-- Fair lock: acquire (protocol.md, "Fair lock").
-- KEYS[1]: the lock hash; KEYS[2]: the queue (list); KEYS[3]: the deadlines (sorted set);
-- KEYS[4]: the channel prefix ("redisson_lock__channel:{name}"; the head's is ":<holder>" more).
-- ARGV[1]: lease in ms; ARGV[2]: holder; ARGV[3]: wait in ms; ARGV[4]: "1" for a try-once
-- attempt, which never enqueues; ARGV[5]: the holder's count the client expects before this
-- request (protocol.md, "Sent again"); ARGV[6]: the place timeout (fair_queue.lua); ARGV[7]: the
-- message ("0"); ARGV[8]: the publish command. (Redisson's acquire sends its clock as `now`;
-- lockman's reads the server's: fair_prune.lua.)
-- A prune that dropped the head of a free lock wakes the new head on its own channel, unless
-- it is this holder (which takes the lock below): as a release would, since nobody else will
-- (lockman; protocol.md, "Fair lock").
-- Reply: {count} when acquired (the holder's count: 1 is a new hold); otherwise how long in ms until something changes: when enqueued,
--        the protocol's ttl; else the holder's PTTL, or with no holder (the head has not come
--        back yet) the time until the head's deadline (the place timeout when it has none).
-- Reply {0} (lockman): the request re-enters a hold (ARGV[5] > 0) whose field is gone; nothing
-- is taken, and the client counts that hold lost before it asks again as a new hold (a
-- re-entry never creates the field: a request sent again could not tell its own new field
-- from the count it expected).
-- A queued waiter that comes back keeps its place: its deadline moves on (below).
-- (fair_prune.lua runs first: stale heads are gone, and `now` is set.)
-- Continued by fair_reenter.lua (a non-reentrant fair lock: fair_refuse_reentry.lua), then
-- fair_queue.lua: joined into one script when the crate is built.
local expect = tonumber(ARGV[5])
if redis.call('exists', KEYS[1]) == 0 then
    if pruned then
        local new_head = redis.call('lindex', KEYS[2], 0)
        if new_head ~= false and new_head ~= ARGV[2] then
            redis.call(ARGV[8], KEYS[4] .. ':' .. new_head, ARGV[7])
        end
    end
    if expect > 0 then
        return {0}
    end
    local head = redis.call('lindex', KEYS[2], 0)
    if head == false or head == ARGV[2] then
        redis.call('lpop', KEYS[2])
        redis.call('zrem', KEYS[3], ARGV[2])
        for _, waiter in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
            redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), waiter)
        end
        redis.call('hset', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        return {1}
    end
end
-- A read-write lock's hash (its `mode` field) is another kind of lock: WRONGTYPE, left as it is.
if redis.call('hexists', KEYS[1], 'mode') == 1 then
    return redis.error_reply('WRONGTYPE Operation against a lock of another kind')
end
local held = redis.call('hget', KEYS[1], ARGV[2])
local count = tonumber(held)
if count == expect + 1 then
    -- Sent again: its first run took this hold. Replied as then; only the lease is set again.
    -- (A busy attempt sent again runs again: it keeps its place in the queue, see below.)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {count}
end
