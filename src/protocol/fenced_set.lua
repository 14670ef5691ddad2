-- Fenced write (docs/protocol.md, "Fenced writes"): SET a key only for a token no older than
-- the newest token seen for that key, and remember the token. Checked and advanced in one
-- script, so two writers can never both pass with tokens out of order.
-- KEYS[1]: the fence hash (lockman_fence:{name}); KEYS[2]: the protected key.
-- ARGV[1]: the writer's token (decimal); ARGV[2]: the value.
-- Reply: 1 when written; 0 when refused (a newer token wrote there before).
-- Tokens stay below 2^53, where Lua numbers are exact (fence_token.lua).
local seen = tonumber(redis.call('hget', KEYS[1], KEYS[2]) or '0') or 0
local token = tonumber(ARGV[1])
if token == nil or token < seen then
    return 0
end
redis.call('hset', KEYS[1], KEYS[2], ARGV[1])
redis.call('set', KEYS[2], ARGV[2])
return 1
