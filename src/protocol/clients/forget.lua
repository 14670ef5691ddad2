-- A manager that shuts down takes its client record away (docs/protocol.md, "Client records").
-- KEYS[1] the record, KEYS[2] the index; ARGV[1] the client id.
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
