-- Wake waiters of a condition variable: signal (one) or broadcast (all).
--
-- KEYS[1]  waiters zset: token -> registration expiry (server time, ms)
-- KEYS[2]  woken zset: token -> acknowledgement deadline (server time, ms)
-- ARGV     channel prefix (a waiter's channel is prefix .. token), ack_ms,
--          all ('1': broadcast), seen ('1': the caller has just found the
--          waiters zset with EXISTS, src/backend/redis/cond_ops.c; absent or
--          '0': the script looks)
--
-- A signal wakes the oldest live waiter (cond_wake.lua), and pays the
-- wake-ups owed: those not acknowledged within ack_ms (handed on here, or
-- by a waiter's cond_refresh.lua).  Registrations past their expiry belong
-- to waiters that died: dropped.
--
-- Reads and PUBLISHes come first, writes last: a script that fails part
-- way (a channel the ACL denies, foreign data) has changed nothing.
--
-- Returns the number of waiters woken.

-- @include cond_wake.lua

-- No waiter registered: the waiters zset is gone (Redis drops an emptied
-- zset; its TTL is its last registration's), so there is nobody to wake
-- or to pay an owed wake-up to.  One read instead of five: a work queue
-- signals at every push and pop, mostly to nobody (issue 28, pool commands
-- per job).  A caller that expects nobody sends that EXISTS alone, without
-- a script, and this one only if it found the key.
--
-- The woken set is not looked at: a wake-up owed (its waiter froze before
-- acknowledging) with no other waiter registered is owed to nobody.  It
-- stays until its key expires (6 ack periods past its deadline), and may
-- wake a waiter that registers meanwhile: a spurious wake-up, which POSIX
-- allows.  Until issue 28 this case was a script that dropped it; a woken
-- waiter not yet acknowledged (the usual case: it is taking the mutex
-- back) made every signal meanwhile a 5-command script.
if ARGV[4] ~= '1' and redis.call('EXISTS', KEYS[1]) == 0 then
	return 0
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ack = string.format('%.0f', now + tonumber(ARGV[2]))

local owed = redis.call('ZCOUNT', KEYS[2], '-inf', now)
-- Every registration, live or not: the expired ones are counted, so that
-- they are pruned only when there are some.
local live, stale = live_waiters(KEYS[1], now)

if ARGV[3] == '1' then
	-- Every waiter registered now; that also pays what was owed.
	local n = 0
	for _, w in ipairs(live) do
		n = n + redis.call('PUBLISH', ARGV[1] .. w, 'b')
	end
	if #live + stale > 0 then
		redis.call('DEL', KEYS[1])
	end
	if owed > 0 then
		redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
	end
	return n
end

local woken, tried = wake_oldest(live, 1 + owed, ARGV[1])
record_woken(KEYS[1], KEYS[2], now, live, tried, woken, ack, tonumber(ARGV[2]), stale, owed)
return #woken
