-- Keep a lease for the holder's process (README "Cached leases"): reserve
-- a block of fencing tokens for its local holds and mark the lease cached.
--
-- KEYS[1]  lock hash, KEYS[2] meta hash (acquire.lua)
-- ARGV     token, wake channel, block (tokens to reserve)
--
-- Returns {1, last}  kept: the tokens last-block+1 .. last are the
--                    caller's (decimal string: it may pass 2^53); every
--                    later token of any holder is above them
--         {0}        not ours any more
--         {2}        someone asked for the lock meanwhile: do not keep it
--
-- The lock hash's `cache` field names the channel on which acquire.lua
-- tells the holder that another process wants the lock; the meta state
-- `cached` says that a process that dies now held nothing (acquire.lua
-- counts only `held` and `died` as an owner that died).
--
-- Every read comes before the first write (acquire.lua); HINCRBY, the
-- first write, fails on a counter that is not an integer before anything
-- changed.  The counter is a decimal below 2^63 (token.lua: ms << 20).
local cur, want = unpack(redis.call('HMGET', KEYS[1], 'token', 'w'))
if cur ~= ARGV[1] then
	return {0}
end
if want then
	return {2}
end
redis.call('HINCRBY', KEYS[2], 'fence', tonumber(ARGV[3]))
redis.call('HSET', KEYS[2], 'state', 'cached')
redis.call('HSET', KEYS[1], 'cache', ARGV[2])
return {1, redis.call('HGET', KEYS[2], 'fence')}
