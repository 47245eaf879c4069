-- May this user run everything the library's scripts run?  Called by
-- dmutex_client_open (src/backend/redis/check.c) so that a confined ACL user is
-- refused at open, naming what it lacks, rather than failing at some later
-- unlock or wake-up.
--
-- KEYS[1]  a scratch key under the prefix, gone when the script ends
-- ARGV[1]  a scratch channel under the prefix
--
-- Each command any script uses is tried once, with pcall: returns {} when
-- all ran, else {command, Redis's reason} for the first one refused.  The
-- list must follow the scripts (tests/check_probe.py compares them).
local t = redis.pcall('TIME')
if t.err then
	return { 'TIME', t.err }
end
local soon = string.format('%.0f', tonumber(t[1]) * 1000 + 60000)
local k = KEYS[1]
local steps = {
	{ 'HSET', k, 'f', '1' }, { 'PEXPIRE', k, '60000' }, { 'PTTL', k },
	{ 'HGET', k, 'f' }, { 'HMGET', k, 'f' }, { 'HINCRBY', k, 'f', '1' },
	{ 'HDEL', k, 'f' }, { 'EXISTS', k }, { 'TYPE', k }, { 'PERSIST', k }, { 'DEL', k },
	{ 'ZADD', k, '1', 'a' }, { 'PEXPIREAT', k, soon }, { 'ZSCORE', k, 'a' },
	{ 'ZCOUNT', k, '-inf', '+inf' }, { 'ZCARD', k }, { 'ZRANGE', k, '0', '-1' },
	{ 'ZRANGEBYSCORE', k, '-inf', '+inf' }, { 'ZREMRANGEBYSCORE', k, '-inf', '0' },
	{ 'ZREM', k, 'a' }, { 'DEL', k }, { 'RPUSH', k, 'a' }, { 'DEL', k },
	{ 'SET', k, '1', 'PX', '60000' }, { 'GET', k }, { 'SET', k, '2', 'KEEPTTL' }, { 'DEL', k },
	-- A lock is taken with NX and GET together, which Redis 7.0 first
	-- accepts: an older server is refused here, by name, not at a lock.
	{ 'SET', k, '1', 'NX', 'PX', '60000', 'GET' }, { 'DEL', k },
	{ 'PUBLISH', ARGV[1], 'probe' },
}
for _, s in ipairs(steps) do
	local r = redis.pcall(unpack(s))
	if type(r) == 'table' and r.err then
		redis.pcall('DEL', k)
		return { s[1], r.err }
	end
end
return {}
