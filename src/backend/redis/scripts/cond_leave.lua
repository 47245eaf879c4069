-- A waiter leaves: woken, timed out, or spuriously woken.
--
-- KEYS[1]  waiters zset, KEYS[2] woken zset (see cond_signal.lua),
-- KEYS[3]  waiters' info hash (see cond_register.lua)
-- ARGV     token
--
-- Removing the token from the woken set acknowledges the wake-up, so it is
-- not handed on to another waiter.  Both keys are read first: foreign data
-- in either fails the script before it wrote anything.
--
-- Returns 1 if the token was still a waiter (nobody woke it), else 0.
redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZSCORE', KEYS[2], ARGV[1])
local still = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return still
