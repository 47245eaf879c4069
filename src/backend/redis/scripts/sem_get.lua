-- Read or delete a counting semaphore, or read the server's time.
--
-- KEYS[1]  semaphore hash: v (free permits), init (the creator's value)
-- ARGV     op ('g' get, 'u' unlink, 't' time), initial value (for 'g')
--
-- get: the free permits; a missing semaphore reads as the caller's initial
-- value, as the next take would create it.  unlink: 1 deleted, 0 missing.
-- time: the server's time in ms (a retry's deadline is counted on it: see
-- sem_op.lua).
if ARGV[1] == 'u' then
	return redis.call('DEL', KEYS[1])
end
if ARGV[1] == 't' then
	local t = redis.call('TIME')
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local v = redis.call('HGET', KEYS[1], 'v')
if not v then
	return tonumber(ARGV[2])
end
return tonumber(v)
