-- Redlock: raise a node's fencing counter to the token just handed out.
--
-- KEYS[1]  meta hash
-- ARGV[1]  the token (the maximum of the counters of the acquiring nodes)
--
-- Written to a quorum before the lock call returns, so that the quorum of
-- the next acquisition, which must share a node with this one, starts
-- counting above it.  Never lowers a counter.
local cur = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
local want = tonumber(ARGV[1])
if cur < want then
	redis.call('HSET', KEYS[1], 'fence', want)
end
return 1
