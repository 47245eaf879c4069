-- Keep a lease for the holder's process (README "Cached leases"): reserve
-- a block of fencing tokens for its local holds and mark the lease cached.
--
-- KEYS[1]  lock key, KEYS[2] meta hash (acquire.lua)
-- ARGV     token, block (tokens to reserve), keep_ms (lease_ms + idle_ms),
--          batch ('1': kept for a batch of the process's own waiting
--          threads, whoever else waits; the holder does not listen on the
--          wake channel and gives the lease back after the batch)
--
-- Returns {1, last}  kept: the tokens last-block+1 .. last are the
--                    caller's (decimal string: it may pass 2^53); every
--                    later token of any holder is above them
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
-- Every read comes before the first write (acquire.lua); the first write
-- (the counter's, token.lua) fails on a meta hash that is not a hash
-- before anything changed.  The counter is a decimal below 2^63 (ms << 20).

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
-- The block starts above every token handed out and above the clock, as
-- any hold's token does.
fresh_token(KEYS[2], redis.call('HGET', KEYS[2], 'fence'), '0')
redis.call('HINCRBY', KEYS[2], 'fence', tonumber(ARGV[2]) - 1)
redis.call('HSET', KEYS[2], 'v', VERSION)
redis.call('PEXPIRE', KEYS[2], ARGV[3])
if not flags:find('c', 1, true) then
	redis.call('SET', KEYS[1], value(cur, fence, died, with_flag(flags, 'c'), rest), 'KEEPTTL')
end
return {batch and 3 or 1, redis.call('HGET', KEYS[2], 'fence')}
