-- Extend many leases in one call: the renewal thread's batch.
--
-- KEYS     lock hashes
-- ARGV     token_1, lease_ms_1, token_2, lease_ms_2, ...
--
-- Returns one integer per key: 1 renewed, 0 not ours any more (expired,
-- deleted, taken by another, or replaced by foreign data).  One bad key
-- must not fail the whole batch, hence pcall.
local out = {}
for i = 1, #KEYS do
	local cur = redis.pcall('HGET', KEYS[i], 'token')
	if cur == ARGV[2 * i - 1] then
		redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
		out[i] = 1
	else
		out[i] = 0
	end
end
return out
