-- Fair lock, after fair_acquire.lua: the holder holds it already, and takes it once more.
if held then
    count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {count}
end
