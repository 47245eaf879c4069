-- Create a counting semaphore unless it exists.
--
-- KEYS[1]  semaphore hash: v (free permits), init (the creator's value)
-- ARGV     value, mode ('0' create or join, '1' create only (exclusive),
--          '2' join only)
--
-- Returns 1 created, 0 joined an existing one, -1 exists and exclusive,
-- -2 missing and join only.
if redis.call('EXISTS', KEYS[1]) == 1 then
	if ARGV[2] == '1' then
		return -1
	end
	return 0
end
if ARGV[2] == '2' then
	return -2
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'init', ARGV[1])
return 1
