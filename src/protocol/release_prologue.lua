-- Reentrant lock, shared prologue of release.lua and hand_off.lua (joined to each when the crate
-- is built, so that each still runs as one script): one hold of the holder is released; the
-- script goes on only when that was the holder's last.
-- KEYS[1]: the lock hash. ARGV[2]: lease in ms to restore; ARGV[3]: holder.
-- Reply here: nil when the holder has no field (nothing changes, nothing is published); 0 when
-- holds remain (PTTL reset to the lease).
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
end
