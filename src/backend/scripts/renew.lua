-- Extend many leases in one call: the renewal thread's batch.
--
-- KEYS     lock hash 1, meta hash 1, lock hash 2, meta hash 2, ...
-- ARGV     idle_ms, token_1, lease_ms_1, token_2, lease_ms_2, ...
--
-- A held name's meta hash lives idle_ms past the lease (acquire.lua).
--
-- Returns one integer per lock: 1 renewed, 0 not ours any more (expired,
-- deleted, taken by another, or replaced by foreign data).  One bad key
-- must not fail the whole batch, hence pcall; PEXPIRE cannot fail on a key
-- the pcall'd HGET found to be a hash.
local out = {}
local idle = tonumber(ARGV[1])
for i = 1, #KEYS / 2 do
	local cur = redis.pcall('HGET', KEYS[2 * i - 1], 'token')
	if cur == ARGV[2 * i] then
		redis.call('PEXPIRE', KEYS[2 * i - 1], ARGV[2 * i + 1])
		if redis.pcall('TYPE', KEYS[2 * i])['ok'] == 'hash' then
			redis.call('PEXPIRE', KEYS[2 * i], tonumber(ARGV[2 * i + 1]) + idle)
		end
		out[i] = 1
	else
		out[i] = 0
	end
end
return out
