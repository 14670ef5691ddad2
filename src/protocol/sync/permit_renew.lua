-- Watchdog: renew the permits of a batch of grants (protocol.md, "Permit semaphore"), as
-- updateLeaseTime on each id.
-- KEYS[2i - 1]: grant i's semaphore (free permits); KEYS[2i]: its held permits. ARGV[1]: the
-- lease in ms (the watchdog timeout); ARGV[i + 1]: grant i's ids, 16 bytes each, concatenated.
-- An id is renewed (score now + lease) while it is in the set and not expired; an expired one
-- is left for the next reclaim, since any client may give it away from then on.
-- Reply: an array, element i = 1 when every permit of grant i was renewed, 0 when one is gone.
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local lease = tonumber(ARGV[1])
local renewed = {}
for i = 1, #KEYS / 2 do
    local set, ids = KEYS[2 * i], ARGV[i + 1]
    local all = redis.call('type', set)['ok'] == 'zset'
    if all then
        for j = 1, #ids, 16 do
            local id = string.sub(ids, j, j + 15)
            local score = tonumber(redis.call('zscore', set, id))
            if score and score > now then
                redis.call('zadd', set, 'xx', now + lease, id)
            else
                all = false
            end
        end
    end
    renewed[i] = all and 1 or 0
end
return renewed
