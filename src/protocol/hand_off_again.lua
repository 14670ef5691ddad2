-- Local hand-off sent again (protocol.md, "Sent again"), joined before release_prologue.lua in
-- hand_off.lua's script: its first run ran when the next holder (ARGV[4]) counts one more hold
-- than the client expected before it (ARGV[8]) and the releasing holder (ARGV[3]) has no field
-- left. Replied as then, with the lease set again (see acquire.lua); a fenced lock's token read
-- back from the counter (nobody else can have taken one since: the lock is the next holder's).
if tonumber(redis.call('hget', KEYS[1], ARGV[4])) == tonumber(ARGV[8]) + 1
    and redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    redis.call('pexpire', KEYS[1], ARGV[6])
    if ARGV[7] == '1' then
        return {1, tonumber(redis.call('get', KEYS[2])) or next_token(KEYS[2])}
    end
    return {1}
end
