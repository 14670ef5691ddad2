-- Group multi-lock: the watchdog renews one hold (protocol.md, "Group multi-lock"), as
-- Redisson's `FastMultilockTask` does.
-- KEYS[1]: the group hash. ARGV[1]: the watchdog timeout in ms; ARGV[2]: holder;
-- ARGV[3..]: the members.
-- Reply: 1 when every member's field holds the holder (each expire_time raised to now + the
--        timeout, the key's PTTL raised to the timeout); 0 when one does not (nothing changes:
--        the hold is lost).
-- The key is read again after its write: on lockman's tracking connection (NOLOOP) the
-- write drops the key from the server's tracking table without telling lockman, and that read
-- tracks it again (protocol.md, "Watched holds").
local key = KEYS[1]
local holder = ARGV[2]
if redis.call('type', key)['ok'] ~= 'hash' then
    return 0
end
for i = 3, #ARGV do
    if redis.call('hget', key, ARGV[i]) ~= holder then
        return 0
    end
end
local t = redis.call('time')
local timeout = tonumber(ARGV[1])
local ends = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + timeout
for i = 3, #ARGV do
    local field = ARGV[i] .. ':' .. holder .. ':expire_time'
    local old = tonumber(redis.call('hget', key, field))
    if old == nil or old < ends then
        redis.call('hset', key, field, ends)
    end
end
local left = redis.call('pttl', key)
if left >= 0 and left < timeout then
    redis.call('pexpire', key, timeout)
end
redis.call('exists', key)
return 1
