-- Synchronizers (protocol.md, "Semaphore", "Permit semaphore", "Count-down latch"): the counter
-- every one of them keeps in its main key, read before the script that follows.
-- counter(key): the key's number; nil when missing. A key of another type, or a string that is
-- no number, raises WRONGTYPE and the script changes nothing.
local function counter(key)
    local kind = redis.call('type', key)['ok']
    if kind == 'none' then
        return nil
    end
    local n = kind == 'string' and tonumber(redis.call('get', key))
    if not n then
        error({err = 'WRONGTYPE ' .. key .. ' is not a synchronizer\'s counter'})
    end
    return n
end
