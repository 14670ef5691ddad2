-- The fields of a lock's hash (its holders, and a read-write lock's `mode`), changing nothing:
-- the deadlock probe's read of the lock a wait follows (docs/protocol.md, "Waits for deadlock
-- detection"). Anyone who may write the lock's key can bloat it: a hash with more than ARGV[1]
-- fields or ARGV[2] bytes (MEMORY USAGE with SAMPLES 0, after HLEN) is not read. Where the
-- user may not run MEMORY USAGE, the field count alone bounds the read.
-- KEYS[1] the lock hash. ARGV[1] the most fields, ARGV[2] the most bytes.
-- Reply: the field names ({} when there is no hash, or a key of another type); the status
-- OVERSIZED for a hash over the bounds.
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then
    return {}
end
if redis.call('HLEN', KEYS[1]) > tonumber(ARGV[1]) then
    return redis.status_reply('OVERSIZED')
end
local usage = redis.pcall('MEMORY', 'USAGE', KEYS[1], 'SAMPLES', '0')
if type(usage) == 'number' and usage > tonumber(ARGV[2]) then
    return redis.status_reply('OVERSIZED')
end
return redis.call('HKEYS', KEYS[1])
