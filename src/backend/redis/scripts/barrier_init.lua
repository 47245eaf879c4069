-- Create a barrier unless it exists, or check its count.
--
-- KEYS[1]  barrier hash: count, gen (cycles completed), arrived (this cycle)
-- ARGV     count
--
-- Returns 1 created, 0 joined, or -N: it exists with count N (another).
local c = redis.call('HGET', KEYS[1], 'count')
if not c then
	redis.call('HSET', KEYS[1], 'count', ARGV[1], 'gen', 0, 'arrived', 0)
	return 1
end
if c ~= ARGV[1] then
	return -tonumber(c)
end
return 0
