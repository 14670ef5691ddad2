-- Read-write lock, read side: release one hold (protocol.md, "Read-write lock").
-- KEYS[1]: the lock hash; KEYS[2]: the channel; KEYS[3]: this holder's timeout-key prefix;
-- KEYS[4]: the name's key prefix ("{name}"), for the other holders' timeout keys.
-- ARGV[1]: the message ("0": wake one); ARGV[2]: holder; ARGV[3]: the publish command;
-- ARGV[4]: the holder's read count the client expects before this request (protocol.md, "Sent
-- again").
-- Reply: nil when the holder has no read field; 0 when this holder still reads (or its count is
--        already one below the expected one: sent again after its first run, which replied 0;
--        nothing changes); 1 when its last
--        read hold is gone (the key deleted and the message published, unless other holders
--        remain: then the hash PTTL becomes the longest remaining read timeout).
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    return nil
end
local held = redis.call('hget', KEYS[1], ARGV[2])
if held == false then
    return nil
end
if tonumber(held) == tonumber(ARGV[4]) - 1 then
    return 0
end
local count = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if count == 0 then
    redis.call('hdel', KEYS[1], ARGV[2])
end
redis.call('del', KEYS[3] .. ':' .. (count + 1))
if redis.call('hlen', KEYS[1]) > 1 then
    local longest = -3
    for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
        local n = tonumber(redis.call('hget', KEYS[1], field))
        if type(n) == 'number' then
            for i = n, 1, -1 do
                local ttl = redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i)
                longest = math.max(ttl, longest)
            end
        end
    end
    local reply = 0
    if count == 0 then reply = 1 end
    if longest > 0 then
        redis.call('pexpire', KEYS[1], longest)
        return reply
    end
    if mode == 'write' then
        return reply
    end
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
return 1
