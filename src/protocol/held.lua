-- Watchdog: whether each hold of a batch is still in place, changing nothing (protocol.md,
-- "Watched holds"). Run on the tracking connection: the keys it reads are then tracked for it,
-- so the server tells lockman at once when one of them is written.
-- KEYS[i]: a lock hash. ARGV[i]: the holder (hash field) of KEYS[i].
-- Reply: an array, element i = 1 when KEYS[i] is a hash holding ARGV[i], 0 when that hold is
--        gone (deleted, expired, evicted, or another's).
local held = {}
for i, key in ipairs(KEYS) do
    if redis.call('type', key)['ok'] == 'hash' and redis.call('hexists', key, ARGV[i]) == 1 then
        held[i] = 1
    else
        held[i] = 0
    end
end
return held
