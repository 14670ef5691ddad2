-- Watchdog: renew a batch of reentrant lock holds with a lock-delay (protocol.md, "Renew",
-- "Lock-delay"): renew.lua, and each hold's delay key set to outlive it by the delay.
-- KEYS[i], i <= n: a lock hash; KEYS[n + i]: its delay key. ARGV[1]: the watchdog timeout in ms;
-- ARGV[2]: the delay in ms; ARGV[i + 2]: the holder of KEYS[i].
-- Reply: an array, element i = 1 when KEYS[i] is a hash holding ARGV[i + 2] (its PTTL is now the
--        timeout), 0 when that hold is gone (the lock is lost).
-- Each key renewed is read again after its write: on lockman's tracking connection (NOLOOP) the
-- write drops the key from the server's tracking table without telling lockman, and that read
-- tracks it again (protocol.md, "Watched holds").
local n = #KEYS / 2
local renewed = {}
for i = 1, n do
    local key, holder = KEYS[i], ARGV[i + 2]
    if redis.call('type', key)['ok'] == 'hash' and redis.call('hexists', key, holder) == 1 then
        redis.call('pexpire', key, ARGV[1])
        redis.call('set', KEYS[n + i], holder, 'px', tonumber(ARGV[1]) + tonumber(ARGV[2]))
        redis.call('exists', key)
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
