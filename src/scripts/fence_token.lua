-- Fenced lock: the next token (docs/protocol.md, "Fenced lock"), joined before the scripts that
-- hand out tokens. The token is the counter's new value, as in Redisson, so both clients draw
-- from one counter; lockman sets it to the greater of the counter plus one and the server's
-- clock in microseconds. On one server the tokens increase whatever the clock does. A counter
-- that is missing or behind (lost with the server's data: a restart without persistence, a
-- failover to a replica that lacked it or had an older value) starts again from the clock,
-- above every token of the lost series: that assumes the clock of the server that hands out
-- the next token is not behind the clock of the one that handed out the last, by more than the
-- time between the two (see protocol.md).
-- The clock is read as text and joined; a Lua number turned back into text would round it.
-- A counter of another type raises WRONGTYPE at the GET, before anything is written.
local function next_token(counter)
    local now = redis.call('time')
    local clock = now[1] .. string.format('%06d', tonumber(now[2]))
    local current = redis.call('get', counter)
    -- Text that is not a number is left to INCR, which refuses it.
    if not current or (tonumber(current) or math.huge) < tonumber(clock) then
        redis.call('set', counter, clock)
    end
    return redis.call('incr', counter)
end
