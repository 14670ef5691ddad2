-- Reentrant lock: force unlock, whoever holds it (protocol.md, "Reentrant lock").
-- KEYS[1]: the lock hash; KEYS[2]: the unlock channel. ARGV[1]: the unlock message ("0");
-- ARGV[2]: the mode a read-write lock must be in ("read" or "write"; "" for other kinds);
-- ARGV[3]: the publish command ("publish" or "spublish"; "" for a spin lock, whose force unlock
-- is Redisson's bare DEL and publishes nothing).
-- Reply: 1 when the key was deleted (and the message published); 0 when there was no key, or a
--        read-write lock in the other mode (a read lock's force unlock leaves a writer alone).
-- A key of another type is not a lock: it is left alone and WRONGTYPE is raised.
local kind = redis.call('type', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
if ARGV[2] ~= '' and redis.call('hget', KEYS[1], 'mode') ~= ARGV[2] then
    return 0
end
if redis.call('del', KEYS[1]) == 1 then
    if ARGV[3] ~= '' then
        redis.call(ARGV[3], KEYS[2], ARGV[1])
    end
    return 1
end
return 0
