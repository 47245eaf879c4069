-- Extend many read shares and write locks in one call (the renewal
-- thread's batch).
--
-- KEYS     per hold: state hash, readers, waiting writers (rw_acquire.lua)
-- ARGV     per hold: op ('r' or 'w'), token, lease_ms; then gc_ms
--
-- Returns one integer per hold: 1 renewed, 0 not ours any more (expired
-- or gone), 2 a read share renewed while a writer waits (the process stops
-- letting more of its threads in, so that the writer is not starved).
--
-- One hold's keys holding something else (WRONGTYPE) must not fail the
-- whole batch, every other hold of the client with it: each first read
-- of a key goes through pcall (as renew.lua's).  A share whose waiting
-- writers' key is foreign is renewed, with no writer counted.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = #KEYS / 3
local gc = tonumber(ARGV[3 * n + 1])
local out = {}

local function keep(key)
	local p = redis.call('PTTL', key)
	if p == -1 or (p >= 0 and p < gc) then
		redis.call('PEXPIRE', key, gc)
	end
end

for i = 1, n do
	local h, rd, q = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
	local op, tok, lease = ARGV[3 * i - 2], ARGV[3 * i - 1], tonumber(ARGV[3 * i])
	out[i] = 0
	if op == 'r' then
		local s = redis.pcall('ZSCORE', rd, tok)
		if type(s) == 'string' and tonumber(s) > now then
			redis.call('ZADD', rd, now + lease, tok)
			keep(rd)
			out[i] = 1
			if type(redis.pcall('ZREMRANGEBYSCORE', q, '-inf', now)) == 'number' and
					redis.call('ZCARD', q) > 0 then
				out[i] = 2
			end
		end
	else
		local w = redis.pcall('HGET', h, 'w')
		if w == tok and tonumber(redis.call('HGET', h, 'wexp')) > now then
			redis.call('HSET', h, 'wexp', now + lease)
			keep(h)
			out[i] = 1
		end
	end
end
return out
