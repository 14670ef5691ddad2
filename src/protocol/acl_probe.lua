-- Which of lockman's needs the server or the calling ACL user refuses, checked without changing
-- anything.
-- KEYS: none. ARGV[1]: a key that does not exist; ARGV[2..]: one channel of each lock channel
-- family.
-- Reply: what is refused, as a list of strings (empty when nothing is): 'READONLY' alone when
-- the server is a read-only replica (it refuses any write, even a DEL of nothing). The key is
-- not declared in KEYS: an ACL user limited to its application's keys may still run the probe,
-- and the DEL it may not do is ignored, like any other error of the DEL (a cluster node that
-- does not own the key). Redis before 7.0 cannot check an ACL (no redis.acl_check_cmd), and a
-- refusal shows at first use.
local missing = {}
local deleted = redis.pcall('del', ARGV[1])
if type(deleted) == 'table' and deleted.err and string.find(deleted.err, 'READONLY', 1, true) then
    return {'READONLY'}
end
if redis.acl_check_cmd == nil then
    return missing
end
for i = 2, #ARGV do
    local channel = ARGV[i]
    if not redis.acl_check_cmd('publish', channel, '0') then
        table.insert(missing, 'publish on ' .. channel)
    end
end
return missing
