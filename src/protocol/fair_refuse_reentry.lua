-- Non-reentrant fair lock, after fair_acquire.lua (protocol.md, "Non-reentrant locks"), as
-- Redisson 4.4's RedissonNonReentrantFairLock: a holder that holds it already is refused with the
-- error reply NON_REENTRANT_REACQUIRE (before any queueing; nothing changes). A request sent again
-- that found its own first run's hold was answered before, by fair_acquire.lua.
if held then
    return redis.error_reply('NON_REENTRANT_REACQUIRE')
end
