-- Redlock: raise a node's fencing counter to the token just handed out.
--
-- KEYS[1]  meta hash
-- ARGV     the token (the maximum of the counters of the acquiring nodes,
--          a decimal string: see acquire.lua), lease_ms + idle_ms
--
-- Written to a quorum before the lock call returns, so that the quorum of
-- the next acquisition, which must share a node with this one, starts
-- counting above it.  Never lowers a counter.
--
-- The hash it writes expires lease_ms + idle_ms from now, as acquire.lua
-- and fence.lua set it: also one this creates, on a node that did not
-- take part in the acquisition (a hash with no expiry would keep the name
-- for ever; no meta hash is meant to have none, a not-recoverable lock is
-- marked on its lock key).
local cur = redis.call('HGET', KEYS[1], 'fence') or '0'
local want = ARGV[1]
if #cur < #want or (#cur == #want and cur < want) then
	redis.call('HSET', KEYS[1], 'v', '3', 'fence', want)
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
