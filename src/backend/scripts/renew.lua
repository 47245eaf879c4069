-- Extend many leases in one call: the renewal thread's batch.
--
-- KEYS     lock hash 1, meta hash 1, lock hash 2, meta hash 2, ...
-- ARGV     idle_ms, token_1, lease_ms_1, token_2, lease_ms_2, ...
--
-- A held name's meta hash lives idle_ms past the lease (acquire.lua).
--
-- Returns one integer per lock: 1 renewed, 0 not ours any more (expired,
-- deleted, taken by another, or replaced by foreign data).  One bad key
-- must not fail the whole batch, hence pcall; PEXPIRE fails on no type.
-- The meta hash is not checked: the acquire that took this hold read it as
-- a hash, and PEXPIRE on a missing key does nothing (three calls a lock,
-- not four: this runs for every held lock every third of a lease).
local out = {}
local idle = tonumber(ARGV[1])
for i = 1, #KEYS / 2 do
	local cur = redis.pcall('HGET', KEYS[2 * i - 1], 'token')
	if cur == ARGV[2 * i] then
		redis.call('PEXPIRE', KEYS[2 * i - 1], ARGV[2 * i + 1])
		redis.call('PEXPIRE', KEYS[2 * i], tonumber(ARGV[2 * i + 1]) + idle)
		out[i] = 1
	else
		out[i] = 0
	end
end
return out
