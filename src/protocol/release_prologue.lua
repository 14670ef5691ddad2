-- Reentrant lock, shared prologue of release.lua and hand_off.lua (joined to each when the crate
-- is built, so that each still runs as one script): one hold of the holder is released; the
-- script goes on only when that was the holder's last.
-- KEYS[1]: the lock hash. ARGV[2]: lease in ms to restore; ARGV[3]: holder; ARGV[5]: the
-- holder's count the client expects before this request (protocol.md, "Sent again").
-- Reply here: nil when the holder has no field (nothing changes, nothing is published); 0 when
-- holds remain (PTTL reset to the lease), or when the count is already one below the expected
-- one (sent again after its first run: replied as then, nothing changes).
local held = redis.call('hget', KEYS[1], ARGV[3])
if held == false then
    return nil
end
local count = tonumber(held)
if count == tonumber(ARGV[5]) - 1 then
    return 0
end
-- The last hold is deleted with the key (below), without counting it down. A count that is not
-- an integer makes HINCRBY raise Redis's error, changing nothing.
if count == nil or count > 1 then
    redis.call('hincrby', KEYS[1], ARGV[3], -1)
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
end
