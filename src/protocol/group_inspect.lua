-- Group multi-lock: read one holder's state in one round trip, changing nothing (protocol.md,
-- "Group multi-lock").
-- KEYS[1]: the group hash. ARGV[1]: holder; ARGV[2..]: the members.
-- Reply: {locked (1 when a member has an owner whose expire_time has not passed, as Redisson's
--        isLocked), the holder's count (0 unless every member is the holder's, unexpired: then
--        the least of its members' lock_count), PTTL in ms (-2 when no key)}.
local key = KEYS[1]
local kind = redis.call('type', key)['ok']
if kind == 'none' then
    return {0, 0, -2}
end
if kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local locked = 0
local count = nil
for i = 2, #ARGV do
    local owner = redis.call('hget', key, ARGV[i])
    local ends = nil
    if owner then
        ends = tonumber(redis.call('hget', key, ARGV[i] .. ':' .. owner .. ':expire_time'))
    end
    if ends and ends >= now then
        locked = 1
    end
    if owner == ARGV[1] and ends and ends >= now then
        local n = tonumber(redis.call('hget', key, ARGV[i] .. ':' .. owner .. ':lock_count')) or 0
        if count == nil or n < count then
            count = n
        end
    else
        count = 0
    end
end
return {locked, count or 0, redis.call('pttl', key)}
