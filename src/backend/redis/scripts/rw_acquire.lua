-- Take a read share or the write lock of a read-write lock.
--
-- KEYS[1]  state hash: w (writer's token), wexp (its lease end, server ms),
--          fms, fseq (the last fencing token, as time and sequence), wo
--          (who writes, for operators: the writer's token, then ARGV[6];
--          a writer of a client before it leaves none, and one it left
--          is another token's: dmutex status shows it only under w's)
-- KEYS[2]  readers: sorted set, token -> lease end (server ms); one member
--          per process that reads (its threads share it)
-- KEYS[3]  waiting writers: sorted set, token -> end of the intent
-- ARGV     op ('r' read, 'w' write), token, lease_ms, wait ('1': a writer
--          that will wait registers its intent), gc_ms (idle keys vanish
--          after this long), then (absent from clients before it) the
--          writer's "since_ms pid tid hostid host"
--
-- Returns {0, fms, fseq}  taken (a reader gets {0, 0, 0})
--         {1, pttl_ms}    not now; the blocking hold ends in at most pttl_ms
--
-- Writer preference: while a writer waits (an unexpired intent), no new
-- read share is given, so overlapping readers drain and the writer gets in.
-- Expired shares and intents are swept here: a dead holder blocks nobody
-- past its lease.  A retry after a lost reply carries the same token and
-- finds its own hold: it answers as the first attempt did.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op, tok, lease, gc = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[5])

local function keep(key)
	local p = redis.call('PTTL', key)
	if p == -1 or (p >= 0 and p < gc) then
		redis.call('PEXPIRE', key, gc)
	end
end

redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local w = redis.call('HGET', KEYS[1], 'w')
local wexp = 0
if w then
	wexp = tonumber(redis.call('HGET', KEYS[1], 'wexp'))
	if wexp <= now then
		redis.call('HDEL', KEYS[1], 'w', 'wexp', 'wo')
		w = nil
	end
end

if op == 'r' then
	if redis.call('ZSCORE', KEYS[2], tok) then
		redis.call('ZADD', KEYS[2], now + lease, tok)
		keep(KEYS[2])
		return {0, 0, 0}
	end
	if w then
		return {1, wexp - now}
	end
	local q = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
	if q[1] then
		return {1, tonumber(q[2]) - now}
	end
	redis.call('ZADD', KEYS[2], now + lease, tok)
	keep(KEYS[2])
	return {0, 0, 0}
end

if w == tok then
	redis.call('HSET', KEYS[1], 'wexp', now + lease)
	keep(KEYS[1])
	return {0, tonumber(redis.call('HGET', KEYS[1], 'fms')),
		tonumber(redis.call('HGET', KEYS[1], 'fseq'))}
end
local busy
if w then
	busy = wexp - now
else
	local r = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
	if r[1] then
		busy = tonumber(r[2]) - now
	end
end
if busy then
	if ARGV[4] == '1' then
		redis.call('ZADD', KEYS[3], now + lease, tok)
		keep(KEYS[3])
	end
	return {1, busy}
end

-- The fencing token is (fms << 20) | fseq, put together by the caller:
-- strictly increasing, also after this hash expired and was made again,
-- because the server's clock has moved on by then.  A new millisecond
-- starts fseq at its microseconds times 1024 (below 2^20), not at 0: a
-- hash lost (evicted, flushed) within the millisecond of the last grant
-- must not give its token again (token.lua's floor, likewise).
local fms = tonumber(redis.call('HGET', KEYS[1], 'fms') or '0')
local fseq = tonumber(redis.call('HGET', KEYS[1], 'fseq') or '0') + 1
if now > fms then
	fms, fseq = now, (tonumber(t[2]) % 1000) * 1024
elseif fseq >= 1048576 then
	fms, fseq = fms + 1, 0
end
redis.call('HSET', KEYS[1], 'w', tok, 'wexp', now + lease, 'fms', fms, 'fseq', fseq)
if ARGV[6] then
	redis.call('HSET', KEYS[1], 'wo', tok .. ' ' .. ARGV[6])
end
redis.call('ZREM', KEYS[3], tok)
keep(KEYS[1])
return {0, fms, fseq}
