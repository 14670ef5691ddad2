
-- Request latch (docs/protocol.md, "Request latches"), joined after the script above, which the
-- crate wraps in `local function body()` when it is built, so that each still runs as one script.
-- KEYS[#KEYS]: the latch, "redisson_unlock_latch:{name}:<holder field>", of the request's holder
-- (of a hand-off: of the next holder; KEYS[#KEYS - 1] is then the releasing holder's).
-- ARGV[#ARGV - 2]: this request's id; ARGV[#ARGV - 1]: "a" for an acquire, "r" for a release, "h"
-- for a hand-off; ARGV[#ARGV]: the latch's PTTL in ms.
-- The client sends one request of a holder at a time until its reply comes, so one latch per
-- holder is enough. A request sent again finds its id there and replies what its first run
-- replied, changing nothing; but when what it granted is gone since (the key expired or was
-- deleted: the holder's field, ARGV[2] of an acquire or ARGV[4] of a hand-off, is missing), an
-- acquire replies the key's PTTL, as a busy attempt does, and a hand-off replies 1, as a release
-- that freed the lock does.
-- A release that leaves its holder nothing (nil: it held nothing; 1: its last hold is gone)
-- deletes the latch: sent again, it finds no field and replies nil, which says the same.
local latch = KEYS[#KEYS]
local id, side = ARGV[#ARGV - 2], ARGV[#ARGV - 1]
local seen = redis.call('get', latch)
if seen and string.sub(seen, 1, #id + 1) == id .. '|' then
    if side == 'a' and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
        return redis.call('pttl', KEYS[1])
    end
    local tag, rest = string.sub(seen, #id + 2, #id + 2), string.sub(seen, #id + 3)
    if side == 'h' and tag == 'a' and redis.call('hexists', KEYS[1], ARGV[4]) == 0 then
        return 1
    end
    if tag == 'i' then
        return tonumber(rest)
    elseif tag == 'a' then
        local out = {}
        for n in string.gmatch(rest, '[^,]+') do
            out[#out + 1] = tonumber(n)
        end
        return out
    end
    return nil
end
local reply = body()
if type(reply) == 'table' and reply.err then
    -- Refused (a lock of another kind): nothing changed, nothing to record.
    return reply
end
if side == 'h' and reply ~= 0 then
    redis.call('del', KEYS[#KEYS - 1])
end
if side == 'r' and (reply == nil or reply == 1) then
    redis.call('del', latch)
elseif (side == 'a' and type(reply) ~= 'number') or (side == 'h' and reply ~= nil) or side == 'r' then
    local value = 'n'
    if type(reply) == 'number' then
        value = 'i' .. reply
    elseif type(reply) == 'table' then
        value = 'a' .. table.concat(reply, ',')
    end
    redis.call('set', latch, id .. '|' .. value, 'px', ARGV[#ARGV])
end
return reply
