-- Watchdog: renew a batch of read holds (protocol.md, "Read-write lock", "Read renewal").
-- KEYS[i]: a lock hash. ARGV[1]: the watchdog timeout in ms; ARGV[2i]: the holder of KEYS[i];
-- ARGV[2i + 1]: that name's key prefix ("{name}").
-- Reply: an array, element i = 1 when KEYS[i] holds ARGV[2i] (that holder's timeout keys now
--        have the timeout as PTTL, and the hash at least that), 0 when that hold is gone.
-- Only the renewing holder's own timeout keys are renewed, as Redisson's ReadLockTask does since
-- 4.4.0: another client's read hold keeps its own lease (a longer one is not cut, and a dead
-- client's hold runs out), so the final release can tell that no reader remains. The hash is
-- only lengthened, never shortened: another reader's longer lease still needs it (Redisson
-- sets it to the timeout, which could cut it).
-- Each key renewed is read again after its write: on lockman's tracking connection (NOLOOP) the
-- write drops the key from the server's tracking table without telling lockman, and that read
-- tracks it again (protocol.md, "Watched holds").
local renewed = {}
for i, key in ipairs(KEYS) do
    local holder, prefix = ARGV[2 * i], ARGV[2 * i + 1]
    local count = nil
    if redis.call('type', key)['ok'] == 'hash' then
        count = tonumber(redis.call('hget', key, holder))
    end
    if count ~= nil then
        for j = count, 1, -1 do
            redis.call('pexpire', prefix .. ':' .. holder .. ':rwlock_timeout:' .. j, ARGV[1])
        end
        if redis.call('pttl', key) < tonumber(ARGV[1]) then
            redis.call('pexpire', key, ARGV[1])
            redis.call('exists', key)
        end
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
