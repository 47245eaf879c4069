-- Read or delete a counting semaphore.
--
-- KEYS[1]  semaphore hash: v (free permits), init (the creator's value)
-- ARGV     op ('g' get, 'u' unlink), initial value (for 'g')
--
-- get: the free permits; a missing semaphore reads as the caller's initial
-- value, as the next take would create it.  unlink: 1 deleted, 0 missing.
if ARGV[1] == 'u' then
	return redis.call('DEL', KEYS[1])
end
local v = redis.call('HGET', KEYS[1], 'v')
if not v then
	return tonumber(ARGV[2])
end
return tonumber(v)
