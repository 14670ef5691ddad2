-- Watchdog: renew a batch of holds (protocol.md, "Renew").
-- KEYS[i]: a lock hash. ARGV[1]: the watchdog timeout in ms; ARGV[i + 1]: the holder of KEYS[i].
-- Reply: an array, element i = 1 when KEYS[i] is a hash holding ARGV[i + 1] (its PTTL is now the
--        timeout), 0 when that hold is gone (the lock is lost).
-- Each key renewed is read again after its write: on lockman's tracking connection (NOLOOP) the
-- write drops the key from the server's tracking table without telling lockman, and that read
-- tracks it again (protocol.md, "Watched holds").
local renewed = {}
for i, key in ipairs(KEYS) do
    if redis.call('type', key)['ok'] == 'hash' and redis.call('hexists', key, ARGV[i + 1]) == 1 then
        redis.call('pexpire', key, ARGV[1])
        redis.call('exists', key)
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
