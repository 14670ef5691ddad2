-- Another manager's long waits (publish.lua), changing nothing.
-- KEYS[1] the hash. Reply: its fields and values, flat.
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then
    return {}
end
return redis.call('HGETALL', KEYS[1])
