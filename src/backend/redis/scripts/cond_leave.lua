-- A waiter leaves: woken, timed out, or spuriously woken.
--
-- KEYS[1]  waiters zset, KEYS[2] woken zset (see cond_signal.lua),
-- KEYS[3]  waiters' info hash (see cond_register.lua)
-- ARGV     token
--
-- Removing the token from the woken set acknowledges the wake-up, so it is
-- not handed on to another waiter.  The woken set is read first, and the
-- first write is the waiters zset's: foreign data in either fails the
-- script before it wrote anything.  The woken set is written only if the
-- token is in it (a waiter that timed out was not woken: 3 commands, a
-- woken one 4; issue 28, pool commands per job).
--
-- Returns 1 if the token was still a waiter (nobody woke it), else 0.
local woken = redis.call('ZSCORE', KEYS[2], ARGV[1])
local still = redis.call('ZREM', KEYS[1], ARGV[1])
if woken then
	redis.call('ZREM', KEYS[2], ARGV[1])
end
redis.call('HDEL', KEYS[3], ARGV[1])
return still
