-- Arrive at a barrier, or read its generation.
--
-- KEYS[1]  barrier hash: count, gen (cycles completed), arrived (this cycle)
-- KEYS[2]  this arrival's result, kept a while under the caller's token: a
--          call retried after a lost reply is not counted twice
-- ARGV     op ('a' arrive, 'g' generation), count, channel, result ttl (ms)
--
-- arrive: {gen, serial}: gen is the cycle the caller arrived in; serial 1
-- for the arrival that completed it (the cycle moves on, arrived goes back
-- to 0 and the channel is told), else 0.  A missing barrier (the server
-- lost its data) is created afresh with the caller's count.
-- generation: {gen, 0}.
if ARGV[1] == 'g' then
	return { tonumber(redis.call('HGET', KEYS[1], 'gen') or '0'), 0 }
end
local done = redis.call('GET', KEYS[2])
if done then
	local g, s = string.match(done, '(%d+):(%d)')
	return { tonumber(g), tonumber(s) }
end
if redis.call('EXISTS', KEYS[1]) == 0 then
	redis.call('HSET', KEYS[1], 'count', ARGV[2], 'gen', 0, 'arrived', 0)
end
local count = tonumber(redis.call('HGET', KEYS[1], 'count'))
local gen = tonumber(redis.call('HGET', KEYS[1], 'gen'))
local arrived = redis.call('HINCRBY', KEYS[1], 'arrived', 1)
local serial = 0
if arrived >= count then
	redis.call('HSET', KEYS[1], 'gen', gen + 1, 'arrived', 0)
	redis.call('PUBLISH', ARGV[3], gen + 1)
	serial = 1
end
redis.call('SET', KEYS[2], string.format('%d:%d', gen, serial), 'PX', ARGV[4])
return { gen, serial }
