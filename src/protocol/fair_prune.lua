-- Fair lock, shared prologue of the fair scripts but the leave (joined to each when the crate
-- is built, so that each still runs as one script): sets `now`, and drops queue heads whose
-- deadline has passed, so a queue behind a dead waiter moves on.
-- KEYS[2]: the queue (list); KEYS[3]: the deadlines (sorted set).
-- `now` is the Redis server's clock (TIME), not the client's: every lockman client judges the
-- places by the same clock, whatever its own says (protocol.md, "Fair lock"). A Redisson client
-- sends its own clock; its skew against the server's is what moves its places against
-- lockman's. Reading TIME before writing needs script effects replication: Redis 5's default,
-- Redis 7's only mode; asked for here for a 6.x server set otherwise.
if redis.replicate_commands ~= nil then
    redis.replicate_commands()
end
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
-- Sets `pruned` when a head was dropped: a script that then finds the lock free wakes the new
-- head (protocol.md, "Fair lock"), as a release would, since nobody else will.
-- A head with no deadline (a Redisson client can leave one) stays, as Redisson's prune keeps
-- it: its owner takes its turn when it comes back.
local pruned = false
while true do
    local head = redis.call('lindex', KEYS[2], 0)
    if head == false then break end
    local deadline = tonumber(redis.call('zscore', KEYS[3], head))
    if deadline == nil or deadline > now then break end
    redis.call('zrem', KEYS[3], head)
    redis.call('lpop', KEYS[2])
    pruned = true
end
