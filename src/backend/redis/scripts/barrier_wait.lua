-- Arrive at a barrier, or read its generation, or the server's time.
--
-- KEYS[1]  barrier hash: count, gen (cycles completed), arrived (this cycle)
-- KEYS[2]  this arrival's result, kept under the caller's token for the
--          client's retry window and a second more: a call retried after a
--          lost reply is not counted twice
-- ARGV     op ('a' arrive, 'g' generation, 't' time), count, channel,
--          retry window (ms), deadline: '0' on a first try, else the
--          server time (ms) after which this retry is refused (see
--          sem_op.lua)
--
-- arrive: {gen, serial}: gen is the cycle the caller arrived in; serial 1
-- for the arrival that completed it (the cycle moves on, arrived goes back
-- to 0 and the channel is told), else 0; {-1, 0} a retry refused.  A
-- missing barrier (the server lost its data) is created afresh with the
-- caller's count.
-- generation: {gen, 0}.  time: {server time (ms), 0}.
local function now_ms()
	local t = redis.call('TIME')
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if ARGV[1] == 'g' then
	return { tonumber(redis.call('HGET', KEYS[1], 'gen') or '0'), 0 }
end
if ARGV[1] == 't' then
	return { now_ms(), 0 }
end
local done = redis.call('GET', KEYS[2])
if done then
	local g, s = string.match(done, '(%d+):(%d)')
	return { tonumber(g), tonumber(s) }
end
if ARGV[5] ~= '0' and now_ms() > tonumber(ARGV[5]) then
	return { -1, 0 }
end
-- Reads and the PUBLISH before any write: a script that fails (a channel
-- the ACL denies, foreign data) must not have counted the arrival.
local b = redis.call('HMGET', KEYS[1], 'count', 'gen', 'arrived')
local count, gen, arrived = tonumber(ARGV[2]), 0, 0
if b[1] then
	count, gen, arrived = tonumber(b[1]), tonumber(b[2]), tonumber(b[3])
	if not (count and gen and arrived) then
		return redis.error_reply('WRONGTYPE barrier key holds data dmutex did not write')
	end
end
arrived = arrived + 1
local serial = 0
if arrived >= count then
	redis.call('PUBLISH', ARGV[3], gen + 1)
	redis.call('HSET', KEYS[1], 'count', count, 'gen', gen + 1, 'arrived', 0)
	serial = 1
else
	redis.call('HSET', KEYS[1], 'count', count, 'gen', gen, 'arrived', arrived)
end
redis.call('SET', KEYS[2], string.format('%d:%d', gen, serial), 'PX', tonumber(ARGV[4]) + 1000)
return { gen, serial }
