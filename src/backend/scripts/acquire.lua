-- Take a lock if it is free or already carries our token.
--
-- KEYS[1]  lock hash, expires with the lease: token, fence, died, owner info
-- KEYS[2]  meta hash, persistent: fence counter, robust state
-- ARGV     token, lease_ms, host, pid, tid, since_ms (wall clock), hostid
--          (boot id/pid namespace), robust (1/0): the last four for operators
--          (`dmutex status`: is the holder alive; owner died or expired)
--
-- Returns {0, fence, died}  acquired (died = 1: the previous hold ended
--                           without an unlock)
--         {1, pttl_ms}      held by someone else for at most pttl_ms more
--         {2}               not recoverable until an operator resets it
--
-- A retry after a lost reply carries the same token: it finds the lock
-- already ours and answers as the first attempt did, so a lost reply never
-- strands a lock and never bumps the fencing counter twice.
--
-- Every read comes before the first write: a script that fails (WRONGTYPE
-- on foreign data, a command the ACL denies) must not have changed anything.
local tok = ARGV[1]
local cur = redis.call('HGET', KEYS[1], 'token')
if cur == tok then
	local fence = tonumber(redis.call('HGET', KEYS[1], 'fence'))
	-- Redlock: while our first attempt's key sat here, another holder may
	-- have raised this node's counter (fence_raise); a token handed out
	-- now must still be above it.  On one node the two are always equal.
	local counter = tonumber(redis.call('HGET', KEYS[2], 'fence') or '0')
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	if counter > fence then
		fence = redis.call('HINCRBY', KEYS[2], 'fence', 1)
		redis.call('HSET', KEYS[1], 'fence', fence)
	end
	return {0, fence, tonumber(redis.call('HGET', KEYS[1], 'died'))}
end
if cur then
	return {1, redis.call('PTTL', KEYS[1])}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
	return redis.error_reply('WRONGTYPE lock key holds data dmutex did not write')
end

-- 'held' with no lock key: the last holder's lease ran out (crash, stall,
-- partition).  'died': it exited holding the lock.  Both are owner-died.
local state = redis.call('HGET', KEYS[2], 'state')
if state == 'notrec' then
	return {2}
end
local died = 0
if state == 'held' or state == 'died' then
	died = 1
end
local fence = redis.call('HINCRBY', KEYS[2], 'fence', 1)
redis.call('HSET', KEYS[2], 'state', 'held', 'robust', ARGV[8])
redis.call('HSET', KEYS[1], 'token', tok, 'fence', fence, 'died', died,
	'host', ARGV[3], 'pid', ARGV[4], 'tid', ARGV[5], 'since', ARGV[6],
	'lease', ARGV[2], 'hostid', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {0, fence, died}
