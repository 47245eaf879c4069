-- A waiter checks whether it was woken: if not, its registration is kept
-- alive; if so, the wake-up is acknowledged.  Also hands on unacknowledged
-- wake-ups.
--
-- KEYS[1]  waiters zset: token -> registration expiry (server time, ms)
-- KEYS[2]  woken zset: token -> acknowledgement deadline (server time, ms)
-- KEYS[3]  waiters' info hash (see cond_register.lua)
-- ARGV     token, ttl_ms, channel prefix (a waiter's channel is prefix ..
--          token), ack_ms
--
-- A wake-up that was not acknowledged in time went to a waiter that froze
-- or lost its host after it was woken: it is owed to another waiter.  The
-- waiters' periodic refreshes make sure it is handed on even if nobody
-- signals again.
--
-- Reads and PUBLISHes come first, writes last (see cond_signal.lua).
--
-- Returns 1: still a waiter, its expiry moved on; 0: not a waiter any more
-- (woken, or expired), and the wake-up is acknowledged.

-- @include cond_wake.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ack = string.format('%.0f', now + tonumber(ARGV[4]))

local owed = redis.call('ZCOUNT', KEYS[2], '-inf', now)
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
local still = mine and tonumber(mine) > now
local live = {}
if owed > 0 then
	live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%.0f', now), '+inf')
end
local woken, tried, tried_me = wake_oldest(live, owed, ARGV[3], ARGV[1])
if tried_me then
	still = false
end

record_woken(KEYS[1], KEYS[2], now, live, tried, woken, ack, tonumber(ARGV[4]), nil, owed)

if not still then
	-- Woken: this acknowledges it (see cond_signal.lua).
	redis.call('ZREM', KEYS[2], ARGV[1])
	redis.call('HDEL', KEYS[3], ARGV[1])
	return 0
end
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
redis.call('PEXPIREAT', KEYS[3], last[2])
return 1
