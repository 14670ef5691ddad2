-- Fair lock (lockman): keeps this client's places alive (protocol.md, "Fair lock", "Places kept
-- alive"). Sent by a lock actor with queued waiters every third of its places' wait (the place
-- timeout, or a shorter fair wait timeout), so that a place whose process died expires within
-- about two place timeouts.
-- KEYS[1]: the lock hash; KEYS[2]: the queue (list); KEYS[3]: the deadlines (sorted set);
-- KEYS[4]: the channel prefix ("redisson_lock__channel:{name}"; the head's is ":<holder>" more).
-- ARGV[1]: the place timeout in ms (the cap on the lock's PTTL for the head's base); ARGV[2]: the
-- message ("0"); ARGV[3]: the publish command; ARGV[4..]: pairs of a holder this client has a
-- place for and that place's wait in ms. (`now` is the server's clock: fair_prune.lua.)
-- Each listed holder still queued gets the come-back rule of fair_queue.lua, never an earlier
-- deadline: its wait after the deadline of the waiter ahead, or for the head (and behind a
-- waiter with no deadline) its wait after now plus the lock's PTTL capped at the place timeout.
-- The queue is walked in order, so adjacent places of this client chain on each other's new
-- deadline, and every place behind one that moved on moves on by as much: a Redisson waiter's deadline stays its own wait after the one
-- ahead of it (`D = D_ahead + wait`), so the time it is told to come back in never goes
-- negative while the place ahead of it lives (a Redisson `lock()` would then wait for a
-- message with no time limit).
-- A prune that dropped the head of a free lock wakes the new head on its own channel, as a
-- release would (nobody else will: it would wait for its own timer or give up), unless it is a
-- listed holder, which the reply names to this client.
-- Reply: {the head when the lock is free, else '', then each listed holder no longer queued}.
-- (fair_prune.lua runs first: stale heads are gone, and `now` is set.)
local cap = tonumber(ARGV[1])
local mine = {}
for i = 4, #ARGV, 2 do
    mine[ARGV[i]] = tonumber(ARGV[i + 1])
end
local pttl = math.max(redis.call('pttl', KEYS[1]), 0)
local queue = redis.call('lrange', KEYS[2], 0, -1)
local found = {}
local prev = nil
-- How far the place just walked moved on: every place behind it moves on as much.
local shift = 0
for _, holder in ipairs(queue) do
    local current = tonumber(redis.call('zscore', KEYS[3], holder))
    local deadline = nil
    if current ~= nil then
        deadline = current + shift
    end
    local wait = mine[holder]
    if wait ~= nil then
        found[holder] = true
        -- After the place ahead; at the head, or behind a waiter with no deadline (a Redisson
        -- client's), after the lock's PTTL capped at the place timeout (fair_queue.lua's rule).
        local base = nil
        if prev ~= nil then
            base = tonumber(redis.call('zscore', KEYS[3], prev))
        end
        if base == nil then
            base = now + math.min(pttl, cap)
        end
        if deadline == nil or base + wait > deadline then
            deadline = base + wait
        end
    end
    if deadline ~= nil and (current == nil or deadline > current) then
        redis.call('zadd', KEYS[3], deadline, holder)
        if current ~= nil then
            shift = deadline - current
        end
    elseif current ~= nil then
        shift = 0
    end
    prev = holder
end
local out = {''}
if redis.call('exists', KEYS[1]) == 0 and queue[1] ~= nil then
    out[1] = queue[1]
    if pruned and mine[queue[1]] == nil then
        redis.call(ARGV[3], KEYS[4] .. ':' .. queue[1], ARGV[2])
    end
end
for i = 4, #ARGV, 2 do
    if not found[ARGV[i]] then
        out[#out + 1] = ARGV[i]
    end
end
return out
