-- Keep a lease for the holder's process (README "Cached leases"): mark the
-- lease cached, and reserve a block of fencing tokens for its local holds.
--
-- KEYS[1]  lock key, KEYS[2] meta hash (acquire.lua)
-- ARGV     token, block (tokens to reserve; '0' none: the keep itself,
--          src/core/lease_cache.c, reserves nothing, and a local hold's
--          first dmutex_fence reserves a block with this script, block >
--          0, on the lease already kept), keep_ms (lease_ms + idle_ms),
--          batch ('1': kept for a batch of the process's own waiting
--          threads, whoever else waits; the holder does not listen on the
--          wake channel and gives the lease back after the batch)
--
-- Returns {1, last}  kept: the tokens last-block+1 .. last are the
--                    caller's (decimal string: it may pass 2^53); every
--                    later token of any holder is above them ('0' when
--                    block is '0')
--         {0}        not ours any more
--         {2}        someone asked for the lock meanwhile: do not keep it
--         {3, last}  batch: kept as {1, last}
--
-- The lock's flag c tells acquire.lua to ask the holder for the lock back
-- on the name's wake channel, and operators (`dmutex status`) that the
-- process keeps it.  A batch's holder listens to nothing: a waiter marks
-- w as for any hold, so the release that ends the batch publishes.  Only
-- non-robust locks are kept: a process that dies while it keeps a lease
-- held nothing.
--
-- Every read comes before the first write (acquire.lua); with a block to
-- reserve, the meta hash's HGET fails on a meta hash that is not a hash
-- before anything changed (without one the script does not read it).
-- The counter is a decimal below 2^63 (ms << 20).

-- @include token.lua
-- @include layout.lua

local cur = ARGV[1]
local fence, died, flags, rest = ours(KEYS[1], cur)
if not fence then
	return {0}
end
local batch = ARGV[4] == '1'
if not batch and flags:find('w', 1, true) then
	return {2}
end
-- x + n for a decimal string without leading zeros and a small n >= 0,
-- exactly (Lua's numbers lose digits past 2^53).
local function plus(x, n)
	local out, i, carry = {}, #x, n
	while i > 0 or carry > 0 do
		local d = (i > 0 and string.byte(x, i) - 48 or 0) + carry
		out[#out + 1] = string.char(48 + d % 10)
		carry = math.floor(d / 10)
		i = i - 1
	end
	return string.reverse(table.concat(out))
end

-- No tokens asked for: the keep alone (issue 28: most programs never ask a
-- local hold for its token, and a pool keeps 0.4 leases a job, each 7
-- calls with a block, 3 without).
local last = '0'
if ARGV[2] ~= '0' then
	-- The block starts above every token handed out and above the clock, as
	-- any hold's token does (fresh_token's first token, token.lua: the
	-- clock, read even when a counter is there, keeps tokens growing past
	-- a counter that went back with a restore or a failover); its last
	-- token is written with the layout's version in one HSET, and answered
	-- as written: no HINCRBY and HGET (issue 28, pool commands per job).
	local t = redis.call('TIME')
	local first = following(redis.call('HGET', KEYS[2], 'fence'),
		tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(t[2]) % 1000)
	last = plus(first, tonumber(ARGV[2]) - 1)
	redis.call('HSET', KEYS[2], 'fence', last, 'v', VERSION)
	redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
if not flags:find('c', 1, true) then
	redis.call('SET', KEYS[1], value(cur, fence, died, with_flag(flags, 'c'), rest), 'KEEPTTL')
end
return {batch and 3 or 1, last}
