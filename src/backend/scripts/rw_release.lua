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
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op, tok, ch = ARGV[1], ARGV[2], ARGV[3]

if op == 'r' then
	local s = redis.call('ZSCORE', KEYS[2], tok)
	if not s then
		return 0
	end
	redis.call('ZREM', KEYS[2], tok)
	if redis.call('ZCARD', KEYS[2]) == 0 then
		redis.call('PUBLISH', ch, 'r')
	end
	if tonumber(s) <= now then
		return 0
	end
	return 1
end

local dropped = redis.call('ZREM', KEYS[3], tok)
if dropped == 1 and redis.call('ZCARD', KEYS[3]) == 0 then
	redis.call('PUBLISH', ch, 'q')
end
if op == 'q' then
	return dropped
end
if redis.call('HGET', KEYS[1], 'w') ~= tok then
	return 0
end
local wexp = tonumber(redis.call('HGET', KEYS[1], 'wexp'))
redis.call('HDEL', KEYS[1], 'w', 'wexp')
redis.call('PUBLISH', ch, 'w')
if wexp <= now then
	return 0
end
return 1
