-- Reentrant lock: release one hold (protocol.md, "Reentrant lock").
-- KEYS[1]: the lock hash; KEYS[2]: the unlock channel.
-- ARGV[1]: the unlock message ("0"); ARGV[2]: lease in ms to restore; ARGV[3]: holder;
-- ARGV[4]: the publish command ("publish", or "spublish" for sharded pub/sub in a cluster).
-- Reply: nil when the holder has no field (not held: nothing changes, nothing is published);
--        0 when holds remain (PTTL reset to the lease); 1 when the key was deleted and the
--        unlock message published.
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
local count = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if count > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
return 1
