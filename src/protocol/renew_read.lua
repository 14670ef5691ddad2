-- Watchdog: renew a batch of read holds (protocol.md, "Read-write lock").
-- KEYS[i]: a lock hash. ARGV[1]: the watchdog timeout in ms; ARGV[2i]: the holder of KEYS[i];
-- ARGV[2i + 1]: that name's key prefix ("{name}").
-- Reply: an array, element i = 1 when KEYS[i] holds ARGV[2i] (the hash and every read hold's
--        timeout key now have the timeout as PTTL), 0 when that hold is gone.
local renewed = {}
for i, key in ipairs(KEYS) do
    local holder, prefix = ARGV[2 * i], ARGV[2 * i + 1]
    if redis.call('type', key)['ok'] == 'hash' and redis.call('hexists', key, holder) == 1 then
        redis.call('pexpire', key, ARGV[1])
        for _, field in ipairs(redis.call('hkeys', key)) do
            local n = tonumber(redis.call('hget', key, field))
            if type(n) == 'number' then
                for j = n, 1, -1 do
                    redis.call('pexpire', prefix .. ':' .. field .. ':rwlock_timeout:' .. j, ARGV[1])
                end
            end
        end
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
