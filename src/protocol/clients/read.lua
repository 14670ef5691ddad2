-- Every live client record (docs/protocol.md, "Client records"), changing nothing: the
-- server's time (ms), then each live client's id and its record's fields, flat.
-- KEYS[1] the index; ARGV[1] the prefix of record keys (the index's name and ':').
-- The records share the index's hash tag, so they live in its slot.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {now}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf')) do
    local fields = redis.call('HGETALL', ARGV[1] .. id)
    if #fields > 0 then
        table.insert(out, id)
        table.insert(out, fields)
    end
end
return out
