-- Take a lock if it is free or already carries our token.
--
-- KEYS[1]  lock hash, expires with the lease: v, token, fence, died, owner info
-- KEYS[2]  meta hash: v, fence (the last token handed out), n (holds taken
--          since the hash was created: tokens no longer count them), robust
--          state; expires idle_ms after the lease of its last hold, except
--          in the not-recoverable state, which waits for an operator
-- ARGV     token, lease_ms, host, pid, tid, since_ms (wall clock), hostid
--          (boot id/pid namespace), robust (1/0): the last four for operators
--          (`dmutex status`: is the holder alive; owner died or expired),
--          idle_ms
--
-- Returns {0, fence, died}  acquired (fence a decimal string: it may pass
--                           2^53, where Lua's numbers lose digits; died = 1:
--                           the previous hold ended without an unlock)
--         {1, pttl_ms}      held by someone else for at most pttl_ms more
--         {2}               not recoverable until an operator resets it
--         {3, version}      the keys were written by another version
--
-- Fencing tokens: token = max(previous + 1, server TIME in ms << 20), so
-- the low 20 bits count holds within one millisecond.  A name whose state
-- expired (or was reset) starts again from the server's clock, above every
-- token it handed out before: tokens stay strictly increasing without
-- keeping every name for ever (as long as the server's clock does not go
-- back).
--
-- A retry after a lost reply carries the same token: it finds the lock
-- already ours and answers as the first attempt did, so a lost reply never
-- strands a lock and never hands out a second fencing token.
--
-- Every read comes before the first write: a script that fails (WRONGTYPE
-- on foreign data, a command the ACL denies) must not have changed anything.
local VERSION = '2'
local tok = ARGV[1]
local keep = tonumber(ARGV[2]) + tonumber(ARGV[9])

-- ms << 20 as an exact decimal string (ms < 2^42: the parts stay exact).
local function shifted(ms)
	local a, b = math.floor(ms / 1000000) * 1048576, (ms % 1000000) * 1048576
	a, b = a + math.floor(b / 1000000), b % 1000000
	if a == 0 then
		return string.format('%d', b)
	end
	return string.format('%d%06d', a, b)
end
-- x > y for decimal strings without leading zeros.
local function above(x, y)
	if #x ~= #y then
		return #x > #y
	end
	return x > y
end

local lv, cur, lfence = unpack(redis.call('HMGET', KEYS[1], 'v', 'token', 'fence'))
local mv, counter, state = unpack(redis.call('HMGET', KEYS[2], 'v', 'fence', 'state'))
if (lv and lv ~= VERSION) or (mv and mv ~= VERSION) then
	return {3, lv or mv}
end
-- Keys without v were written by version 1: its counter counted from 1,
-- far below any token of this version, so they are taken over as they are.
local t = redis.call('TIME')
local floor = shifted(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))

-- The next token: above the counter and the clock.  Written by the caller.
local function next_fence()
	if counter and not above(floor, counter) then
		redis.call('HINCRBY', KEYS[2], 'fence', 1)
		return redis.call('HGET', KEYS[2], 'fence')
	end
	redis.call('HSET', KEYS[2], 'fence', floor)
	return floor
end

if cur == tok then
	local died = tonumber(redis.call('HGET', KEYS[1], 'died'))
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	-- Redlock: while our first attempt's key sat here, another holder may
	-- have raised this node's counter (fence_raise); a token handed out
	-- now must still be above it.  On one node the two are always equal.
	if counter and above(counter, lfence or '0') then
		lfence = next_fence()
		redis.call('HSET', KEYS[1], 'fence', lfence)
	end
	redis.call('HSET', KEYS[2], 'v', VERSION)
	redis.call('PEXPIRE', KEYS[2], keep)
	return {0, lfence, died}
end
if cur then
	return {1, redis.call('PTTL', KEYS[1])}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
	return redis.error_reply('WRONGTYPE lock key holds data dmutex did not write')
end

-- 'held' with no lock key: the last holder's lease ran out (crash, stall,
-- partition).  'died': it exited holding the lock.  Both are owner-died.
if state == 'notrec' then
	return {2}
end
local died = 0
if state == 'held' or state == 'died' then
	died = 1
end
local fence = next_fence()
redis.call('HINCRBY', KEYS[2], 'n', 1)
redis.call('HSET', KEYS[2], 'v', VERSION, 'state', 'held', 'robust', ARGV[8])
redis.call('PEXPIRE', KEYS[2], keep)
redis.call('HSET', KEYS[1], 'v', VERSION, 'token', tok, 'fence', fence, 'died', died,
	'host', ARGV[3], 'pid', ARGV[4], 'tid', ARGV[5], 'since', ARGV[6],
	'lease', ARGV[2], 'hostid', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {0, fence, died}
