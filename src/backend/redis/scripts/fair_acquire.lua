-- Take a fair lock, or queue for it (README "Fair locks").
--
-- KEYS[1]  lock hash, KEYS[2] meta hash (as acquire.lua)
-- KEYS[3]  queue: sorted set of waiting tokens, scored by arrival
-- KEYS[4]  places: the same tokens, scored by the server time (ms) at which
--          a waiter that stopped asking loses its place
-- KEYS[5]  the caller's grant list, "<wake channel>:<token>": the release
--          pushes its hand-over (or a wake-up) there, and the waiting
--          thread takes it with BLPOP (fair_release.lua)
-- ARGV     as acquire.lua of layout 2 (token, lease_ms, host, pid, tid, since_ms,
--          hostid, robust, keep_ms, wait); wait 1 (the caller listens on
--          the wake channel): queue if not granted; 0 (trylock, or not
--          subscribed yet): leave the queue as it is; then stamp (ARGV[11]):
--          the request's own, the client's send time, which a hand-over
--          echoes (fair_release.lua; absent from clients before it: their
--          details have no stamp, and their hand-overs carry none); then
--          fresh (ARGV[12]): '1' if no request carried this token before,
--          so that it is in no queue (only its own requests queue a token)
--          and a busy answer need not look for it there
--
-- Returns as acquire.lua: {0, fence, died}, {1, pttl_ms}, {2}, {3, v}.
-- A lock release handed to us (fair_release.lua) already carries our
-- token: taking it is the "already ours" case, which records us as the
-- holder (a claim; the hand-over message spares it where it can).  The
-- lock is granted to a newcomer only when it is free and nobody is queued
-- ahead: no barging.
--
-- A queued waiter leaves in the meta hash, field 'q:' .. token, what its
-- hold would record and the stamp of the request that wrote it: "lease
-- robust host pid tid since hostid stamp", so that the release can make it
-- the holder outright, and tell it which of its requests the hand-over
-- followed.  Written at every busy answer (a waiter asks again at least
-- every third of a lease), so the stamp is that of its latest request.
--
-- Every read comes before the first write (see acquire.lua), but for two
-- that cannot undo anything: the caller's grant list is emptied first (it
-- cannot fail), and the places are read, or written, only where they
-- matter (a free lock's head; our place), before the queue is written.
-- Fewest commands on the way of a busy answer, the common one: the dead
-- are pruned by the release, which reads them anyway.
local VERSION = '2'
local tok = ARGV[1]
local lease = tonumber(ARGV[2])
local keep = ARGV[9]          -- lease + idle_ms, summed by the client

-- @include token.lua

local lv, cur, died, fence = unpack(redis.call('HMGET', KEYS[1], 'v', 'token', 'died', 'fence'))
local mv, counter, state, n = unpack(redis.call('HMGET', KEYS[2], 'v', 'fence', 'state', 'n'))
if (lv and lv ~= VERSION) or (mv and mv ~= VERSION) then
	return {3, lv or mv}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Whether we are queued, read where it matters: a fresh token is not
-- (or, were this very request run twice, by a resend on a new
-- connection, it is and keeps its place: ZADD NX below), but for a free
-- lock, whose queue is read whole anyway, and a lock handed to us.
local fresh = ARGV[12] == '1'
local queued
if not fresh or cur == tok then
	queued = redis.call('ZSCORE', KEYS[3], tok)
end
local pttl
if cur and cur ~= tok then
	pttl = redis.call('PTTL', KEYS[1])
end
-- This answer says all a message pushed before it could (the lock is ours
-- now, or the hold it handed us is over): drop it, so that whatever the
-- caller pops after a "busy" came after this request (its lease counts
-- from the request's send time).  A write before the last check below,
-- but one that cannot fail, and harmless if the script ends in an error.
redis.call('DEL', KEYS[5])

-- Waiters whose place ran out are dropped where who comes first matters:
-- a free lock's head (here) and every release (fair_release.lua).  A busy
-- answer leaves them to the release, which reads them anyway.
local function prune(gone)
	for _, w in ipairs(gone) do
		redis.call('ZREM', KEYS[3], w)
		redis.call('ZREM', KEYS[4], w)
		redis.call('HDEL', KEYS[2], 'q:' .. w)
	end
end
local function leave()
	if queued then
		redis.call('ZREM', KEYS[3], tok)
		redis.call('ZREM', KEYS[4], tok)
		redis.call('HDEL', KEYS[2], 'q:' .. tok)
	end
end
-- Queue (or keep our place): a place lasts a lease; the waiter asks again
-- at least every third of it.
local function enqueue()
	-- The queue's tail read first, then the places: the first command on
	-- that key (a foreign type fails here, before the queue is written).
	local last
	if not queued then
		local tail = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
		last = tail[2] and tonumber(tail[2]) or 0
	end
	redis.call('ZADD', KEYS[4], now + lease, tok)
	if last then
		redis.call('ZADD', KEYS[3], 'NX', last + 1, tok)
	end
	redis.call('PEXPIRE', KEYS[3], keep)
	redis.call('PEXPIRE', KEYS[4], keep)
	-- Only into a meta hash that lives already (a holder set its expiry).
	if mv then
		redis.call('HSET', KEYS[2], 'q:' .. tok, table.concat({ ARGV[2], ARGV[8], ARGV[3],
			ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[11] }, ' '))
	end
end

if cur == tok then
	-- Handed to us, or a retry of our own acquire: record the holder.
	leave()
	if state == 'handed' or state == 'died' then
		redis.call('HSET', KEYS[2], 'state', 'held')
	end
	redis.call('HSET', KEYS[1], 'host', ARGV[3], 'pid', ARGV[4], 'tid', ARGV[5],
		'since', ARGV[6], 'lease', ARGV[2], 'hostid', ARGV[7])
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	redis.call('PEXPIRE', KEYS[2], keep)
	return {0, fence, tonumber(died or '0')}
end
if cur then
	if ARGV[10] == '1' then
		enqueue()
	end
	return {1, pttl}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
	return redis.error_reply('WRONGTYPE lock key holds data dmutex did not write')
end
if state == 'notrec' then
	return {2}
end
-- The live head: the first queued token whose place has not run out.
local head
local queue = redis.call('ZRANGE', KEYS[3], 0, -1)
if #queue > 0 then
	local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
	local dead = {}
	for _, w in ipairs(gone) do
		dead[w] = true
	end
	queued = nil
	for _, w in ipairs(queue) do
		if w == tok then
			queued = true
		end
	end
	-- Ours ran out too: pruned with the others, queued anew below.
	if dead[tok] then
		queued = nil
	end
	for _, w in ipairs(queue) do
		if not dead[w] then
			head = w
			break
		end
	end
	prune(gone)
end
if head and head ~= tok then
	-- Free, but others came first: the head takes it when it asks.
	if ARGV[10] == '1' then
		enqueue()
	end
	return {1, -1}
end

leave()
fence = following(counter, now, tonumber(t[2]) % 1000)
local d = 0
if state == 'held' or state == 'died' then
	d = 1
end
redis.call('HSET', KEYS[2], 'v', VERSION, 'state', 'held', 'robust', ARGV[8], 'fence', fence,
	'n', (tonumber(n) or 0) + 1)
redis.call('PEXPIRE', KEYS[2], keep)
redis.call('HSET', KEYS[1], 'v', VERSION, 'token', tok, 'fence', fence, 'died', d,
	'host', ARGV[3], 'pid', ARGV[4], 'tid', ARGV[5], 'since', ARGV[6],
	'lease', ARGV[2], 'hostid', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {0, fence, d}
