
-- Request latch of a synchronizer request (protocol.md, "Request latches"), joined after the
-- script above, which the crate wraps in `local function body()`. Every such script replies an
-- array of integers.
-- KEYS[#KEYS]: the latch, "redisson_unlock_latch:{name}:<actor id>:<lane>": one per request
-- under way of one actor, so their number is bounded by that actor's concurrent requests.
-- ARGV[#ARGV - 1]: the request's id; ARGV[#ARGV]: the latch's PTTL in ms.
-- A request sent again finds its id there and replies what its first run replied, changing
-- nothing. A run refused with an error writes nothing.
local latch = KEYS[#KEYS]
local id = ARGV[#ARGV - 1]
local seen = redis.call('get', latch)
if seen and string.sub(seen, 1, #id + 1) == id .. '|' then
    local out = {}
    for n in string.gmatch(string.sub(seen, #id + 2), '[^,]+') do
        out[#out + 1] = tonumber(n)
    end
    return out
end
local reply = body()
local parts = {}
for i, n in ipairs(reply) do
    parts[i] = string.format('%.0f', n)
end
redis.call('set', latch, id .. '|' .. table.concat(parts, ','), 'px', ARGV[#ARGV])
return reply
