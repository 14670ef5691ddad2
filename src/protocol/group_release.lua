-- Group multi-lock: release one hold of every member (protocol.md, "Group multi-lock").
-- KEYS[1]: the group hash; KEYS[2]: the unlock channel (`redisson_lock__channel:{group}`).
-- ARGV[1]: the unlock message ("0"); ARGV[2]: lease in ms to restore; ARGV[3]: holder;
-- ARGV[4]: the publish command ("publish" or "spublish"); ARGV[5]: the holder's count the client
-- expects before this request; ARGV[6..]: the members.
-- Reply: nil when a member is not the holder's, unexpired (nothing changes: unlike Redisson's,
--        which counts down the members before the first it finds not held); 0 when holds
--        remain (each member's expire_time raised to now + lease, the key's PTTL at least the
--        lease), or when the count is already one below the expected one (sent again after its
--        first run: replied as then, nothing changes); 1 when the last hold went: each member's
--        three fields deleted and the unlock message published, as Redisson's unlock does.
local key = KEYS[1]
local holder = ARGV[3]
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local count = nil
for i = 6, #ARGV do
    if redis.call('hget', key, ARGV[i]) ~= holder then
        return nil
    end
    local prefix = ARGV[i] .. ':' .. holder
    local ends = tonumber(redis.call('hget', key, prefix .. ':expire_time'))
    local n = tonumber(redis.call('hget', key, prefix .. ':lock_count'))
    if ends == nil or ends < now or n == nil then
        return nil
    end
    if count == nil or n > count then
        count = n
    end
end
if count == nil then
    return nil
end
if count == tonumber(ARGV[5]) - 1 then
    return 0
end
if count > 1 then
    local lease = tonumber(ARGV[2])
    local ends = now + lease
    for i = 6, #ARGV do
        local prefix = ARGV[i] .. ':' .. holder
        redis.call('hincrby', key, prefix .. ':lock_count', -1)
        if tonumber(redis.call('hget', key, prefix .. ':expire_time')) < ends then
            redis.call('hset', key, prefix .. ':expire_time', ends)
        end
    end
    local left = redis.call('pttl', key)
    if left > 0 and left < lease then
        redis.call('pexpire', key, lease)
    end
    return 0
end
for i = 6, #ARGV do
    local prefix = ARGV[i] .. ':' .. holder
    redis.call('hdel', key, ARGV[i], prefix .. ':expire_time', prefix .. ':lock_count')
end
redis.call(ARGV[4], KEYS[2], ARGV[1])
return 1
