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
-- Reads and PUBLISHes come first, writes last: a script that fails part
-- way (a channel the ACL denies, foreign data) has changed nothing.
--
-- Returns the number of waiters woken.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ack = string.format('%.0f', now + tonumber(ARGV[2]))

local owed = redis.call('ZCOUNT', KEYS[2], '-inf', now)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%.0f', now), '+inf')

if ARGV[3] == '1' then
	-- Every waiter registered now; that also pays what was owed.
	local n = 0
	for _, w in ipairs(live) do
		n = n + redis.call('PUBLISH', ARGV[1] .. w, 'b')
	end
	redis.call('DEL', KEYS[1])
	redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
	return n
end

local want, woken, tried = 1 + owed, {}, 0
for _, w in ipairs(live) do
	if #woken >= want then
		break
	end
	tried = tried + 1
	if redis.call('PUBLISH', ARGV[1] .. w, 's') > 0 then
		woken[#woken + 1] = w
	end
end

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
for i = 1, tried do
	redis.call('ZREM', KEYS[1], live[i])
end
for _, w in ipairs(woken) do
	redis.call('ZADD', KEYS[2], ack, w)
end
if #woken > 0 then
	-- Kept past its last deadline: an expired entry is what tells that a
	-- wake-up is owed.  Every live waiter refreshes within its
	-- registration (3 ack periods), so two registrations later each has
	-- seen it, or is gone; then the key goes (issue 16 item 3: no state
	-- kept for a day).
	local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
	redis.call('PEXPIREAT', KEYS[2], string.format('%.0f', tonumber(last[2]) + 6 * tonumber(ARGV[2])))
end
return #woken
