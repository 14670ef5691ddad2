-- Group multi-lock: force unlock the members, whoever holds them (protocol.md, "Group
-- multi-lock"), as Redisson's `forceUnlockAsync`: each member's field and its owner's
-- expire_time and lock_count fields are deleted, and the unlock message is published.
-- KEYS[1]: the group hash; KEYS[2]: the unlock channel. ARGV[1]: the unlock message ("0");
-- ARGV[2]: the publish command; ARGV[3..]: the members.
-- Reply: how many members had an owner. (Redisson's raises a script error on a member nobody
-- owns, joining `false` to a string; this one skips it.)
local key = KEYS[1]
local kind = redis.call('type', key)['ok']
if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
local removed = 0
for i = 3, #ARGV do
    local owner = redis.call('hget', key, ARGV[i])
    if owner then
        local prefix = ARGV[i] .. ':' .. owner
        redis.call('hdel', key, ARGV[i], prefix .. ':expire_time', prefix .. ':lock_count')
        removed = removed + 1
    end
end
redis.call(ARGV[2], KEYS[2], ARGV[1])
return removed
