-- Fair lock, shared prologue of fair_acquire.lua and fair_release.lua (joined to each when the
-- crate is built, so that each still runs as one script): drops queue heads whose deadline has
-- passed, so a queue behind a dead waiter moves on.
-- KEYS[2]: the queue (list); KEYS[3]: the deadlines (sorted set); ARGV[4]: now, epoch ms.
-- Sets `pruned` when a head was dropped: a script that then finds the lock free wakes the new
-- head (protocol.md, "Fair lock"), as a release would, since nobody else will.
local now = tonumber(ARGV[4])
local pruned = false
while true do
    local head = redis.call('lindex', KEYS[2], 0)
    if head == false then break end
    local deadline = tonumber(redis.call('zscore', KEYS[3], head))
    if deadline ~= nil and deadline > now then break end
    redis.call('zrem', KEYS[3], head)
    redis.call('lpop', KEYS[2])
    pruned = true
end
