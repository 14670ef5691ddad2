-- The service name in one client record (docs/protocol.md, "Client records"), or nil: nil too
-- when the record is not a hash or its service is longer than ARGV[1] bytes (anyone who may
-- write lockman's keys can forge a record; no such read is made long by one).
-- KEYS[1] the record. ARGV[1] the most bytes read.
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then
    return false
end
if redis.call('HSTRLEN', KEYS[1], 'service') > tonumber(ARGV[1]) then
    return false
end
return redis.call('HGET', KEYS[1], 'service')
