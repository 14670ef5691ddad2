-- Group multi-lock: acquire every member at once (protocol.md, "Group multi-lock"; Redisson's
-- `RedissonFasterMultiLock`, `getMultiLock(group, values)`).
-- KEYS[1]: the group hash. Field `<member>` holds its owner; `<member>:<owner>:expire_time` the
-- epoch ms its hold ends; `<member>:<owner>:lock_count` the owner's count.
-- ARGV[1]: lease in ms; ARGV[2]: holder; ARGV[3]: the holder's count the client expects before
-- this request (protocol.md, "Sent again"); ARGV[4..]: the members (hash fields).
-- The clock is the server's (`TIME`), where Redisson passes the Java client's.
-- Reply: {count} when acquired (the holder's count on every member, 1 for a new hold); {0} when
--        a re-entry (ARGV[3] > 0) finds a member no longer the holder's (nothing is taken);
--        otherwise the ms until the latest unexpired hold of another on a member ends, as
--        Redisson's answers.
-- A member another owns counts as free once its expire_time has passed (or is missing), as in
-- Redisson; its stale fields are left to the key's expiry, as Redisson leaves them.
local key = KEYS[1]
local kind = redis.call('type', key)['ok']
if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local holder = ARGV[2]
local expect = tonumber(ARGV[3])
local mine = 0
local count = nil
local same = true
local latest = -1
for i = 4, #ARGV do
    local owner = redis.call('hget', key, ARGV[i])
    if owner == holder then
        local ends = tonumber(redis.call('hget', key, ARGV[i] .. ':' .. holder .. ':expire_time'))
        local n = tonumber(redis.call('hget', key, ARGV[i] .. ':' .. holder .. ':lock_count'))
        if ends and ends >= now and n then
            mine = mine + 1
            if count == nil then
                count = n
            elseif count ~= n then
                same = false
            end
        end
    elseif owner then
        local ends = tonumber(redis.call('hget', key, ARGV[i] .. ':' .. owner .. ':expire_time'))
        if ends and ends > now and ends > latest then
            latest = ends
        end
    end
end
local members = #ARGV - 3
local function lengthen(add)
    local ends = now + lease
    for i = 4, #ARGV do
        local prefix = ARGV[i] .. ':' .. holder
        local old = tonumber(redis.call('hget', key, prefix .. ':expire_time'))
        if old == nil or old < ends then
            redis.call('hset', key, prefix .. ':expire_time', ends)
        end
        if add then
            redis.call('hincrby', key, prefix .. ':lock_count', 1)
        end
    end
    local left = redis.call('pttl', key)
    if left == -2 or (left > 0 and left < lease) then
        redis.call('pexpire', key, lease)
    end
end
if mine == members and same and count == expect + 1 then
    -- Sent again: its first run took this hold. Replied as then; only the lease is set again.
    lengthen(false)
    return {count}
end
if expect > 0 then
    if mine == members and same and count == expect then
        lengthen(true)
        return {count + 1}
    end
    return {0}
end
if latest ~= -1 then
    return math.max(latest - now, 1)
end
-- A new hold: each member the holder's, its count 1 (a count of this holder's left from a hold
-- that expired is started again).
local existed = redis.call('exists', key)
local ends = now + lease
for i = 4, #ARGV do
    local prefix = ARGV[i] .. ':' .. holder
    redis.call('hset', key, ARGV[i], holder, prefix .. ':expire_time', ends, prefix .. ':lock_count', 1)
end
local left = redis.call('pttl', key)
if existed == 0 or (left > 0 and left < lease) then
    redis.call('pexpire', key, lease)
end
return {1}
