-- Give up a read share, the write lock, or a waiting writer's intent.
--
-- KEYS     state hash, readers, waiting writers (as rw_acquire.lua)
-- ARGV     op ('r' read share, 'w' write lock, 'q' intent only), token,
--          wake channel
--
-- Returns 1 released while still valid, 0 not ours (expired or never
-- taken).  A writer's release also drops its intent (an acquire whose reply
-- was lost).  Waiters are woken when the last reader leaves, when the
-- writer leaves, and when the last intent goes (readers held back by it).
--
-- Nothing may fail after the first write (as in release.lua): a script
-- that failed after its ZREM would make the retry, finding the share gone,
-- report a clean unlock as lost.  So every read comes first and each
-- PUBLISH is tried before the writes, under pcall (a user whose channel
-- was revoked still releases; its waiters wake at their own deadline).
-- The messages reach subscribers only after the script ends.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op, tok, ch = ARGV[1], ARGV[2], ARGV[3]

if op == 'r' then
	local s = redis.call('ZSCORE', KEYS[2], tok)
	if not s then
		return 0
	end
	if redis.call('ZCARD', KEYS[2]) == 1 then
		redis.pcall('PUBLISH', ch, 'r')
	end
	redis.call('ZREM', KEYS[2], tok)
	if tonumber(s) <= now then
		return 0
	end
	return 1
end

local intent = redis.call('ZSCORE', KEYS[3], tok)
local mine = op == 'w' and redis.call('HGET', KEYS[1], 'w') == tok
local wexp = mine and tonumber(redis.call('HGET', KEYS[1], 'wexp'))
if intent and redis.call('ZCARD', KEYS[3]) == 1 then
	redis.pcall('PUBLISH', ch, 'q')
end
if mine then
	redis.pcall('PUBLISH', ch, 'w')
end
local dropped = 0
if intent then
	dropped = redis.call('ZREM', KEYS[3], tok)
end
if op == 'q' then
	return dropped
end
if not mine then
	return 0
end
redis.call('HDEL', KEYS[1], 'w', 'wexp', 'wo')
if wexp <= now then
	return 0
end
return 1
