-- Create a counting semaphore unless it exists.
--
-- KEYS[1]  semaphore hash: v (free permits), init (the creator's value)
-- ARGV     value, excl ('1': fail if it exists)
--
-- Returns 1 created, 0 joined an existing one, -1 exists and excl.
if redis.call('EXISTS', KEYS[1]) == 1 then
	if ARGV[2] == '1' then
		return -1
	end
	return 0
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'init', ARGV[1])
return 1
