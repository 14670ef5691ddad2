-- Fenced lock: the next token (docs/protocol.md, "Fenced lock"), joined before the scripts that
-- hand out tokens. While the counter exists it is only incremented, as Redisson's script does,
-- so both clients draw from one series. A missing counter (a new name, or one lost with the
-- server's data: a restart without persistence, a failover to a replica that lacked it) is first
-- set to the server's clock in microseconds, so that the new series starts above every token of
-- the lost one. That holds while fewer tokens were drawn than microseconds passed since the lost
-- series began, and while the clock of the server that seeds is not behind the clock that
-- seeded the lost series by more than the time between them (see protocol.md).
-- The clock is read as text and joined, never through a Lua number, which would round it.
local function next_token(counter)
    if redis.call('exists', counter) == 0 then
        local now = redis.call('time')
        redis.call('set', counter, now[1] .. string.format('%06d', tonumber(now[2])))
    end
    return redis.call('incr', counter)
end
