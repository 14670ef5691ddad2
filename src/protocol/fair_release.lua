-- Fair lock: release one hold (protocol.md, "Fair lock").
-- KEYS[1]: the lock hash; KEYS[2]: the queue; KEYS[3]: the deadlines;
-- KEYS[4]: the channel prefix ("redisson_lock__channel:{name}"; the head's is ":<holder>" more).
-- ARGV[1]: the message ("0"); ARGV[2]: lease in ms to restore; ARGV[3]: holder; ARGV[4]: the
-- publish command; ARGV[5]: the holder's count the client expects before this request
-- (protocol.md, "Sent again"). (Redisson's release sends its clock as `now`; lockman's reads the
-- server's: fair_prune.lua.)
-- Reply: 1 when this release deleted the key and woke the head waiter on its own channel; 0
--        when holds remain (or the count is already one below the expected one: sent again
--        after its first run, which replied 0; nothing changes); nil when the holder has no field, or the key is gone already (the
--        head is woken then too, as Redisson's script does, which replies 1 there: lockman's
--        reply tells the caller that its hold was gone).
-- (fair_prune.lua runs first: stale heads are gone, and `now` is set.)
local function wake_head()
    local head = redis.call('lindex', KEYS[2], 0)
    if head ~= false then
        redis.call(ARGV[4], KEYS[4] .. ':' .. head, ARGV[1])
    end
end
if redis.call('exists', KEYS[1]) == 0 then
    wake_head()
    return nil
end
local held = redis.call('hget', KEYS[1], ARGV[3])
if held == false then
    return nil
end
if tonumber(held) == tonumber(ARGV[5]) - 1 then
    return 0
end
local count = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if count > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
end
redis.call('del', KEYS[1])
wake_head()
return 1
