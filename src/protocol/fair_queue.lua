-- Fair lock, after fair_acquire.lua and its re-entry part: the holder holds nothing; it takes
-- its turn in the queue, or keeps its place there.
-- ARGV[6] (lockman's): the place timeout in ms. The lock's PTTL counts at most that much in the
-- deadline of a place at the head (lockman's places are refreshed while their waiters live:
-- fair_refresh.lua); the reply is the same.
local cap = tonumber(ARGV[6])
local function capped(ttl)
    if ttl > cap then return cap end
    return ttl
end
if expect > 0 then
    return {0}
end
local function until_change()
    local ttl = redis.call('pttl', KEYS[1])
    if ttl >= 0 then return ttl end
    local head = redis.call('lindex', KEYS[2], 0)
    if head == false then return 0 end
    local due = tonumber(redis.call('zscore', KEYS[3], head))
    -- A head with no deadline (a Redisson client's, which the prune keeps): nothing tells when
    -- it comes back, so the caller asks again after a place timeout (not at once, in a loop).
    if due == nil then return cap end
    return math.max(due - now, 0)
end
if ARGV[4] == '1' then
    return until_change()
end
local mine = redis.call('zscore', KEYS[3], ARGV[2])
if mine ~= false then
    -- Queued, and back (lockman's rule): its deadline moves to `wait` after that of the waiter
    -- ahead of it (or after the lock's PTTL, capped, for the head and behind a waiter with no
    -- deadline, as a refresh counts it), if that is later, and every place
    -- behind it moves on as much (a Redisson waiter's deadline stays its wait after the one
    -- ahead: fair_refresh.lua says why). A waiter that does not come back still expires.
    local at = redis.call('lpos', KEYS[2], ARGV[2])
    local base = nil
    if at ~= false and at > 0 then
        base = tonumber(redis.call('zscore', KEYS[3], redis.call('lindex', KEYS[2], at - 1)))
    end
    if base == nil then
        base = now + capped(math.max(redis.call('pttl', KEYS[1]), 0))
    end
    local deadline = base + tonumber(ARGV[3])
    if deadline > tonumber(mine) then
        redis.call('zadd', KEYS[3], deadline, ARGV[2])
        if at ~= false then
            local shift = deadline - tonumber(mine)
            for _, behind in ipairs(redis.call('lrange', KEYS[2], at + 1, -1)) do
                local d = tonumber(redis.call('zscore', KEYS[3], behind))
                if d ~= nil then
                    redis.call('zadd', KEYS[3], d + shift, behind)
                end
            end
        end
    end
    return until_change()
end
local last = redis.call('lindex', KEYS[2], -1)
local last_due = nil
if last ~= false then
    last_due = tonumber(redis.call('zscore', KEYS[3], last))
end
local ttl
if last_due ~= nil then
    ttl = last_due - now
else
    -- Nobody queued, or a tail with no deadline (a Redisson client can leave one): the lock's
    -- PTTL, as Redisson's join counts it (uncapped behind such a tail, as there).
    ttl = redis.call('pttl', KEYS[1])
end
local ahead = ttl
if last == false then
    ahead = capped(ttl)
end
redis.call('zadd', KEYS[3], ahead + tonumber(ARGV[3]) + now, ARGV[2])
redis.call('rpush', KEYS[2], ARGV[2])
return ttl
