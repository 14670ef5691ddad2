-- Reentrant lock: acquire (protocol.md, "Reentrant lock").
-- KEYS[1]: the lock hash.
-- ARGV[1]: lease in ms; ARGV[2]: holder ("<client id>:<n>").
-- Reply: nil when acquired (the holder's count incremented, PTTL set to the lease);
--        otherwise the key's PTTL in ms (what the current holder still has).
-- A key of another type raises WRONGTYPE from HEXISTS and is left as it is.
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
