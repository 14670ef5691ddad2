-- Fair lock: a waiter gives up (protocol.md, "Fair lock").
-- KEYS[1]: the lock hash; KEYS[2]: the queue; KEYS[3]: the deadlines; KEYS[4]: the channel prefix.
-- ARGV[1]: holder; ARGV[2]: its wait in ms; ARGV[3]: the message ("0"); ARGV[4]: the publish
-- command.
-- It leaves the queue and the set, and everyone behind it gets its wait back (their deadlines
-- move `wait` earlier). A head that leaves a free lock wakes the next head.
-- Reply: 1 when it was queued, 0 when not.
local queue = redis.call('lrange', KEYS[2], 0, -1)
local at = nil
for i, waiter in ipairs(queue) do
    if waiter == ARGV[1] then
        at = i
        break
    end
end
if at == nil then
    redis.call('zrem', KEYS[3], ARGV[1])
    return 0
end
for i = at + 1, #queue do
    redis.call('zincrby', KEYS[3], -tonumber(ARGV[2]), queue[i])
end
redis.call('lrem', KEYS[2], 0, ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
if at == 1 and redis.call('exists', KEYS[1]) == 0 then
    local head = redis.call('lindex', KEYS[2], 0)
    if head ~= false then
        redis.call(ARGV[4], KEYS[4] .. ':' .. head, ARGV[3])
    end
end
return 1
