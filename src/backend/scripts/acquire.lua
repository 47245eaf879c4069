-- Take a lock if it is free or already carries our token.
--
-- KEYS[1]  lock hash, expires with the lease: v, token, fence, died, owner
--          info, w (someone waits: release.lua publishes only then)
-- KEYS[2]  meta hash: v, fence (the last token handed out), n (holds taken
--          since the hash was created: tokens no longer count them), robust
--          state; expires idle_ms after the lease of its last hold, except in the
--          not-recoverable state, which waits for an operator
-- ARGV     token, lease_ms, host, pid, tid, since_ms (wall clock), hostid
--          (boot id/pid namespace), robust (1/0): the last four for operators
--          (`dmutex status`: is the holder alive; owner died or expired),
--          keep_ms (lease_ms + idle_ms: how long the meta hash lives from
--          now, summed by the client), wait (1: the caller listens on the wake channel and
--          waits if the lock is busy; 0: trylock, or not subscribed yet),
--          step (1: Redlock, count on from the counter, see below)
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
-- Redlock (step 1): a name with state counts on, last + 1, without the
-- clock.  Each node has its own clock, so with the clock in every token
-- the nodes would almost never agree and every acquisition would need the
-- write-back round (fence_raise.lua, src/backend/redlock.c).  Counting on,
-- nodes that took part in the same holds stay equal, and the write-back
-- runs only after a node missed some.  Tokens still grow across expiry: a
-- counter grows by one a hold, far less than 2^20 a millisecond, so it
-- does not run ahead of the clock (by more than the nodes' clocks differ,
-- when the write-back raised it to another node's value).

-- A retry after a lost reply carries the same token: it finds the lock
-- already ours and answers as the first attempt did, so a lost reply never
-- strands a lock and never hands out a second fencing token.
--
-- Every read comes before the first write: a script that fails (WRONGTYPE
-- on foreign data, a command the ACL denies) must not have changed anything.
--
-- Lean on purpose: each redis.call costs the server about as much as a
-- whole command sent by a client, so the free lock's path (the common one)
-- makes seven: EXISTS, HMGET, TIME, then one HSET and one PEXPIRE per key.
-- Arguments cost too (Redis 7.0, instructions counted by callgrind): about
-- 1,300 each for the script's own (KEYS and ARGV are built for every call),
-- 750 each for a redis.call's, against 4,200 for a whole PING; a Lua number
-- given to redis.call is formatted back to a string, dearer than the
-- PEXPIRE it feeds, so the client sends keep_ms ready-made.
local VERSION = '2'
local tok = ARGV[1]

-- @include token.lua
-- x + 1 for a decimal string, exactly (Lua's numbers stop at 2^53).
local function plus1(x)
	local i = #x
	while i > 0 and x:byte(i) == 57 do
		i = i - 1
	end
	if i == 0 then
		return '1' .. string.rep('0', #x)
	end
	return x:sub(1, i - 1) .. string.char(x:byte(i) + 1) .. string.rep('0', #x - i)
end
-- The server's TIME in ms << 20.
local function clock()
	local t = redis.call('TIME')
	return shifted(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
end

local busy = redis.call('EXISTS', KEYS[1]) == 1
local mv, counter, state, robust, n = unpack(redis.call('HMGET', KEYS[2], 'v', 'fence', 'state', 'robust', 'n'))
if mv and mv ~= VERSION then
	return {3, mv}
end

-- The next token: above the counter and the clock.  The caller writes it.
local function next_fence()
	if counter and mv and ARGV[11] == '1' then
		return plus1(counter)
	end
	local c = clock()
	if counter and not above(c, counter) then
		return plus1(counter)
	end
	return c
end

if busy then
	local lv, cur, lfence, died, cache, want = unpack(redis.call('HMGET', KEYS[1], 'v', 'token', 'fence', 'died',
		'cache', 'w'))
	if lv and lv ~= VERSION then
		return {3, lv}
	end
	if cur == tok then
		redis.call('PEXPIRE', KEYS[1], ARGV[2])
		-- Redlock: while our first attempt's key sat here, another holder
		-- may have raised this node's counter (fence_raise); a token
		-- handed out now must still be above it.  On one node the two are
		-- always equal.
		if counter and above(counter, lfence or '0') then
			lfence = next_fence()
			redis.call('HSET', KEYS[2], 'v', VERSION, 'fence', lfence)
			redis.call('HSET', KEYS[1], 'fence', lfence)
		else
			redis.call('HSET', KEYS[2], 'v', VERSION)
		end
		redis.call('PEXPIRE', KEYS[2], ARGV[9])
		return {0, lfence, tonumber(died) or 0}
	end
	if not cur then
		return redis.error_reply('WRONGTYPE lock key holds data dmutex did not write')
	end
	-- A waiter says so on the key, which ends with this hold: the release
	-- publishes only when someone listens.  A lease kept for its process
	-- (lease_cache.lua; `cache` names the channel its holder listens on)
	-- is asked back, by a trylock too, once per hold: its holder hands it
	-- over at its next unlock, or at once if no thread of it holds it.
	-- Waiters ignore the 'k' they hear on that channel (waiter.c).
	if not want then
		if cache then
			redis.pcall('PUBLISH', cache, 'k')
		end
		if cache or ARGV[10] == '1' then
			redis.call('HSET', KEYS[1], 'w', '1')
		end
	end
	return {1, redis.call('PTTL', KEYS[1])}
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
-- n counted here, not by HINCRBY: one write to the meta hash.
n = string.format('%d', (tonumber(n) or 0) + 1)
if mv and robust == ARGV[8] then
	redis.call('HSET', KEYS[2], 'fence', fence, 'state', 'held', 'n', n)
else
	redis.call('HSET', KEYS[2], 'v', VERSION, 'fence', fence, 'state', 'held', 'n', n, 'robust', ARGV[8])
end
redis.call('PEXPIRE', KEYS[2], ARGV[9])
redis.call('HSET', KEYS[1], 'v', VERSION, 'token', tok, 'fence', fence, 'died', died,
	'host', ARGV[3], 'pid', ARGV[4], 'tid', ARGV[5], 'since', ARGV[6],
	'lease', ARGV[2], 'hostid', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {0, fence, died}
