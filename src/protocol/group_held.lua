-- Group multi-lock: whether one hold is still in place, changing nothing (protocol.md, "Group
-- multi-lock"; run on the tracking connection, as held.lua).
-- KEYS[1]: the group hash. ARGV[1]: holder; ARGV[2..]: the members.
-- Reply: 1 when every member's field holds the holder, 0 otherwise.
local key = KEYS[1]
if redis.call('type', key)['ok'] ~= 'hash' then
    return 0
end
for i = 2, #ARGV do
    if redis.call('hget', key, ARGV[i]) ~= ARGV[1] then
        return 0
    end
end
return 1
