-- Read-write lock, write side: release one hold (protocol.md, "Read-write lock").
-- KEYS[1]: the lock hash; KEYS[2]: the channel.
-- ARGV[1]: the message ("1": wake all); ARGV[2]: lease in ms to restore; ARGV[3]: the write field;
-- ARGV[4]: the publish command; ARGV[5]: the writer's count the client expects before this
-- request (protocol.md, "Sent again").
-- Reply: nil when not held; 0 when holds remain (or the count is already one below the expected
--        one: sent again after its first run, which replied 0; nothing changes); 1 when the
--        write side was released: the key
--        deleted and the message published, or (this holder still reads) mode switched to read.
if redis.call('hget', KEYS[1], 'mode') ~= 'write' then
    return nil
end
local held = redis.call('hget', KEYS[1], ARGV[3])
if held == false then
    return nil
end
if tonumber(held) == tonumber(ARGV[5]) - 1 then
    return 0
end
local count = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if count > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
end
redis.call('hdel', KEYS[1], ARGV[3])
if redis.call('hlen', KEYS[1]) == 1 then
    redis.call('del', KEYS[1])
    redis.call(ARGV[4], KEYS[2], ARGV[1])
else
    redis.call('hset', KEYS[1], 'mode', 'read')
end
return 1
