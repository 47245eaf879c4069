-- Register a waiter of a condition variable, before its mutex is released.
--
-- KEYS[1]  waiters zset: token -> registration expiry (server time, ms)
-- KEYS[2]  waiters' info hash: token -> "host pid tid since_ms hostid", for
--          operators (`dmutex status`); lives as long as the zset
-- ARGV     token, ttl_ms, info
--
-- The waiter refreshes its registration (cond_refresh.lua) while it waits;
-- one that died without leaving expires, and wakers skip it.
--
-- Returns 1.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
-- The key lives as long as its longest registration.
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('PEXPIREAT', KEYS[2], last[2])
return 1
