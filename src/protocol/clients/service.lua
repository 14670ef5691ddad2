-- The service name in one client record (docs/protocol.md, "Client records"), or nil.
-- KEYS[1] the record.
return redis.call('HGET', KEYS[1], 'service')
