-- A hold's fencing token, assigned the first time it is asked for
-- (dmutex_fence): the lock's fast path (a plain SET, redis.c) hands out
-- none, so that a hold that never asks costs Redis no counter and no
-- clock.
--
-- KEYS[1]  lock key, KEYS[2] meta hash (acquire.lua)
-- ARGV     token, keep_ms (lease_ms + idle_ms)
--
-- Returns {1, fence}  the hold's token (decimal string: it may pass 2^53)
--         {0}         not ours any more (expired, or another holder's)
--
-- Sound because the hold is live when its token is assigned (the lock
-- still carries our token) and holds do not overlap: tokens are assigned
-- in hold order, each above the counter and the clock (token.lua).  The
-- token is written into the lock value, so that asking again, or a retry
-- after a lost reply, gets the same one.

-- @include token.lua
-- @include layout.lua

local cur = ARGV[1]
local fence, died, flags, rest = ours(KEYS[1], cur)
if not fence then
	return {0}
end
if fence ~= '-' then
	return {1, fence}
end
fence = fresh_token(KEYS[2], redis.call('HGET', KEYS[2], 'fence'), '0')
redis.call('HSET', KEYS[2], 'v', VERSION)
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], value(cur, fence, died, flags, rest), 'KEEPTTL')
return {1, fence}
