-- Every live client record (docs/protocol.md, "Client records"), changing nothing: the
-- server's time (ms), how many records were skipped, then each live client's id and its
-- record's fields, flat.
-- KEYS[1] the index; ARGV[1] the prefix of record keys (the index's name and ':');
-- ARGV[2] the most index members read; ARGV[3] the most fields, ARGV[4] the most bytes
-- (MEMORY USAGE) of one record; ARGV[5] the most bytes of all records read; ARGV[6] the most
-- members, ARGV[7] the most bytes of the index itself.
-- The records share the index's hash tag, so they live in its slot.
-- Anyone who may write lockman's keys can forge a record: one that is not a hash, has more
-- fields or bytes than the bounds, or comes after the total is spent is skipped and counted,
-- never read, so that no record makes this call long or its reply large. MEMORY USAGE (with
-- SAMPLES 0: every field's size, summed in place; checked after HLEN, so bounded) measures a
-- record without copying it; where the user may not run it, the field count alone bounds it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max_fields, max_bytes = tonumber(ARGV[3]), tonumber(ARGV[4])
local budget = tonumber(ARGV[5])
local skipped = 0
local out = {now, 0}
-- The index can be forged too (members of megabytes): one over its bounds is not read at all,
-- and every member counts as skipped (whoever can forge it can delete it as well).
if redis.call('TYPE', KEYS[1])['ok'] ~= 'zset' then
    return out
end
local members = redis.call('ZCARD', KEYS[1])
local index_ok = members <= tonumber(ARGV[6])
if index_ok then
    local usage = redis.pcall('MEMORY', 'USAGE', KEYS[1], 'SAMPLES', '0')
    index_ok = type(usage) ~= 'number' or usage <= tonumber(ARGV[7])
end
if not index_ok then
    out[2] = members
    return out
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf', 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
    local key = ARGV[1] .. id
    local kind = redis.call('TYPE', key)['ok']
    if kind == 'hash' then
        local bytes = 0
        local ok = redis.call('HLEN', key) <= max_fields
        if ok then
            local usage = redis.pcall('MEMORY', 'USAGE', key, 'SAMPLES', '0')
            if type(usage) == 'number' then
                bytes = usage
                ok = usage <= max_bytes and usage <= budget
            end
        end
        if ok and #id <= 64 then
            budget = budget - bytes
            table.insert(out, id)
            table.insert(out, redis.call('HGETALL', key))
        else
            skipped = skipped + 1
        end
    elseif kind ~= 'none' then
        skipped = skipped + 1
    end
end
out[2] = skipped
return out
