-- Take (wait) or return (post) one permit of a counting semaphore.
--
-- KEYS[1]  semaphore hash: v (free permits), init (the creator's value)
-- KEYS[2]  this operation's result, kept under the caller's token for the
--          client's retry window and a second more: a call retried after a
--          lost reply finds it and does nothing again, so a retry never
--          takes or returns a second permit
-- ARGV     op ('t' take, 'p' post), initial value, max value, channel,
--          retry window (ms), deadline: '0' on a first try, else the
--          server time (ms) after which this retry is refused
--
-- The client gives up a retry once the window has passed since its first
-- try (and refuses to learn it was applied), and sets the deadline no
-- later than the server's time at the first try plus the window: a retry
-- that arrives after it, when the result may be gone, is refused (-2)
-- rather than applied a second time.
--
-- A semaphore that is missing (the server lost its data, or it was
-- unlinked while in use) is created afresh with the caller's initial value.
-- Returns: take 1 (taken) or 0 (none free); post the new value, or -1 at
-- the maximum; -2 a retry refused.  A post publishes on the channel so
-- that waiters try again.
local done = redis.call('GET', KEYS[2])
if done then
	return tonumber(done)
end
if ARGV[6] ~= '0' then
	local t = redis.call('TIME')
	if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > tonumber(ARGV[6]) then
		return -2
	end
end
-- Reads and the PUBLISH before any write: a script that fails (a channel
-- the ACL denies, foreign data) must not have taken or returned a permit.
local v = redis.call('HGET', KEYS[1], 'v')
local create = not v
if create then
	v = ARGV[2]
end
v = tonumber(v)
if not v then
	return redis.error_reply('WRONGTYPE semaphore key holds data dmutex did not write')
end
local r
if ARGV[1] == 't' then
	r = 0
	if v > 0 then
		r = 1
	end
elseif v >= tonumber(ARGV[3]) then
	r = -1
else
	r = v + 1
	redis.call('PUBLISH', ARGV[4], 'p')
end
if create then
	redis.call('HSET', KEYS[1], 'v', ARGV[2], 'init', ARGV[2])
end
if r == 1 and ARGV[1] == 't' then
	redis.call('HINCRBY', KEYS[1], 'v', -1)
elseif ARGV[1] == 'p' and r >= 0 then
	r = redis.call('HINCRBY', KEYS[1], 'v', 1)
end
-- A failed take changed nothing: no need to remember it.
if ARGV[1] == 'p' or r == 1 then
	redis.call('SET', KEYS[2], r, 'PX', tonumber(ARGV[5]) + 1000)
end
return r
