-- Which of lockman's needs the server or the calling ACL user refuses, checked without changing
-- anything.
-- KEYS[1]: a key that does not exist. ARGV: one channel of each lock channel family.
-- Reply: what is refused, as a list of strings (empty when nothing is): 'READONLY' first when
-- the server is a read-only replica (it refuses any write, even a DEL of nothing; a user whose
-- ACL refuses the key learns it at first use instead). Redis before 7.0 cannot check an ACL
-- (no redis.acl_check_cmd), and a refusal shows at first use.
local missing = {}
local deleted = redis.pcall('del', KEYS[1])
if type(deleted) == 'table' and deleted.err and string.find(deleted.err, 'READONLY', 1, true) then
    return {'READONLY'}
end
if redis.acl_check_cmd == nil then
    return missing
end
for _, channel in ipairs(ARGV) do
    if not redis.acl_check_cmd('publish', channel, '0') then
        table.insert(missing, 'publish on ' .. channel)
    end
end
return missing
