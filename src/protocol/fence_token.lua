-- Fenced lock: the next token (docs/protocol.md, "Fenced lock"), joined before the scripts that
-- hand out tokens. The token is the counter's new value, as in Redisson, so both clients draw
-- from one counter; lockman makes it the greater of the counter and the server's clock in
-- microseconds, plus one. On one server the tokens increase whatever the clock does. A counter
-- that is missing or behind (lost with the server's data: a restart without persistence, a
-- failover to a replica that lacked it or had an older value) starts again from the clock,
-- above every token of the lost series: that assumes the clock of the server that hands out
-- the next token is not behind the clock of the one that handed out the last, by more than the
-- time between the two (see protocol.md).
-- Tokens stay below 2^53, where Lua numbers are exact; they are written back with '%.0f' (a
-- number turned into text by Lua itself would be rounded to 14 digits).
-- A counter of another type raises WRONGTYPE at the GET, before anything is written.
local function next_token(counter)
    local now = redis.call('time')
    local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
    local current = tonumber(redis.call('get', counter) or '0')
    -- Text that is not a number, or a count past exact Lua numbers, is left to INCR.
    if current == nil or current >= 2 ^ 53 then
        return redis.call('incr', counter)
    end
    local token = math.max(current, clock) + 1
    redis.call('set', counter, string.format('%.0f', token))
    return token
end
