-- Reentrant lock: release one hold (protocol.md, "Reentrant lock"), after release_prologue.lua.
-- KEYS[1]: the lock hash; KEYS[2]: the unlock channel.
-- ARGV[1]: the unlock message ("0"); ARGV[2]: lease in ms to restore; ARGV[3]: holder;
-- ARGV[4]: the publish command ("publish", or "spublish" for sharded pub/sub in a cluster);
-- ARGV[5]: the holder's count the client expects before this request.
-- KEYS[3] (with a lock-delay, reentrant locks): the delay key, deleted with the lock: a release
-- ends the delay at once.
-- Reply: nil or 0 from the prologue; 1 when the key was deleted and the unlock message published.
redis.call('del', KEYS[1])
if KEYS[3] then
    redis.call('del', KEYS[3])
end
redis.call(ARGV[4], KEYS[2], ARGV[1])
return 1
