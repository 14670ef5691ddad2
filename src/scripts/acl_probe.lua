-- Which of lockman's needs the calling ACL user lacks, checked without changing anything.
-- KEYS: none. ARGV: one channel of each lock channel family.
-- Reply: what the ACL refuses, as a list of strings (empty when nothing is). Redis before 7.0
-- cannot tell (no redis.acl_check_cmd): empty, and a refusal shows at first use instead.
local missing = {}
if redis.acl_check_cmd == nil then
    return missing
end
for _, channel in ipairs(ARGV) do
    if not redis.acl_check_cmd('publish', channel, '0') then
        table.insert(missing, 'publish on ' .. channel)
    end
end
return missing
