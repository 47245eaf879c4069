-- Extend many leases in one call: the renewal thread's batch.
--
-- KEYS     lock key 1, meta hash 1, lock key 2, meta hash 2, ...
-- ARGV     idle_ms, token_1, lease_ms_1, token_2, lease_ms_2, ...
--
-- Returns one integer per lock: 1 renewed, 0 not ours any more (expired,
-- deleted, taken by another, or replaced by foreign data).  One bad key
-- must not fail the whole batch, hence pcall.
--
-- A mutex's lock key is a string (acquire.lua); a fair mutex's is still a
-- hash (fair_acquire.lua), read when GET fails on it.  The meta hash lives
-- idle_ms past the lease where it carries something the next hold needs:
-- a robust hold's state, or a token handed out (its counter).  A plain
-- hold with no token asked has none: one GET and one PEXPIRE a lock (this
-- runs for every held lock every third of a lease).
local out = {}
local idle = tonumber(ARGV[1])
for i = 1, #KEYS / 2 do
	local k, tok = KEYS[2 * i - 1], ARGV[2 * i]
	local val = redis.pcall('GET', k)
	local cur, fence, flags
	if type(val) == 'string' then
		cur, fence, flags = val:match('^3 (%S+) (%S+) %S+ (%S+) ')
	elseif type(val) == 'table' then
		cur, fence, flags = redis.pcall('HGET', k, 'token'), '', 'r'
	end
	if cur == tok then
		redis.call('PEXPIRE', k, ARGV[2 * i + 1])
		if fence ~= '-' or flags ~= '-' then
			redis.call('PEXPIRE', KEYS[2 * i], tonumber(ARGV[2 * i + 1]) + idle)
		end
		out[i] = 1
	else
		out[i] = 0
	end
end
return out
