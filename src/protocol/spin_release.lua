-- Spin lock: release one hold (protocol.md, "Spin lock"), after release_prologue.lua: as
-- release.lua, but nothing is published (Redisson's RedissonSpinLock publishes nothing; its
-- waiters poll). KEYS[1]: the lock hash. ARGV as release.lua's; ARGV[1] and ARGV[4] are unused.
-- Reply: nil or 0 from the prologue; 1 when the key was deleted.
redis.call('del', KEYS[1])
return 1
