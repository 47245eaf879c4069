-- Wake waiters of a condition variable: signal (one) or broadcast (all).
--
-- KEYS[1]  waiters zset: token -> registration expiry (server time, ms)
-- KEYS[2]  woken zset: token -> acknowledgement deadline (server time, ms)
-- ARGV     channel prefix (a waiter's channel is prefix .. token), ack_ms,
--          all ('1': broadcast)
--
-- A signal wakes the oldest live waiter: one whose channel has a
-- subscriber.  A waiter that was killed has none (Redis dropped its
-- connection), so it cannot swallow the wake-up: the next one gets it.  One
-- that froze, or whose host died, still looks subscribed; that is why the
-- woken waiter must acknowledge (cond_leave.lua) within ack_ms, or its
-- wake-up is handed on (here, or by a waiter's cond_refresh.lua).
-- Registrations past their expiry belong to waiters that died: dropped.
--
-- Returns the number of waiters woken.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ack = string.format('%.0f', now + tonumber(ARGV[2]))

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local owed = redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)

if ARGV[3] == '1' then
	-- Every waiter registered now; that also pays what was owed.
	local ws = redis.call('ZRANGE', KEYS[1], 0, -1)
	redis.call('DEL', KEYS[1])
	local n = 0
	for _, w in ipairs(ws) do
		n = n + redis.call('PUBLISH', ARGV[1] .. w, 'b')
	end
	return n
end

local want, woken = 1 + owed, 0
while woken < want do
	local w = redis.call('ZPOPMIN', KEYS[1])
	if #w == 0 then
		break
	end
	if redis.call('PUBLISH', ARGV[1] .. w[1], 's') > 0 then
		redis.call('ZADD', KEYS[2], ack, w[1])
		-- Kept well past its deadlines: an expired entry is what tells
		-- that a wake-up is owed.
		local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
		redis.call('PEXPIREAT', KEYS[2], string.format('%.0f', tonumber(last[2]) + 86400000))
		woken = woken + 1
	end
end
return woken
