-- Release a fair lock: hand it to the head of its queue, or free it.
--
-- KEYS     lock hash, meta hash, queue, places (fair_acquire.lua)
-- ARGV     token, mode, wake channel, idle_ms (as release.lua), lease_ms:
--          the client's lease, which a handed lock starts with only when
--          neither the head nor the releasing hold recorded one (below);
--          then the releaser's next thread, if it
--          has one waiting ('' if not): its token, lease_ms, host, pid, tid
--          and hostid (the hold it would record)
--
-- Returns as release.lua: 1 released (or handed on), 0 not ours, 2
-- released but the channel is denied; {1, fence, died} handed to the next
-- thread.  Not ours also takes the caller out of the queue: a waiter that
-- gives up (mode 3) leaves through here.
--
-- The next thread (a local hand-over, src/core/fair_handoff.c): when nobody
-- queued here comes before it, the lock goes to it outright, as to a head
-- that left its hold's details, and the answer says so: the releaser
-- wakes it in its own process, with no message (nobody queued waits for
-- one).  Otherwise the head gets it as below, and the next thread asks.
--
-- Each queued waiter has its own grant list, the wake channel followed by
-- ':' and its token, on which its waiting thread blocks with BLPOP: a
-- hand-over is pushed to the head's alone, and Redis serves it to that
-- thread as soon as this script ends (no other process is woken, no
-- listener thread relays it, and a message pushed while the waiter is
-- between two BLPOPs waits for it: none is lost).  A release that frees
-- the lock (or leaves it not recoverable) pushes "r" to every waiter
-- still queued (one whose place ran out may still be alive), and
-- publishes it on the wake channel.  A list lives a lease and idle_ms;
-- fair_acquire.lua empties the caller's at every attempt, and a waiter
-- that leaves drops its own.
--
-- A handed lock gets a new fencing token now and the head's token as
-- owner.  A head that left its hold's details (fair_acquire.lua, 'q:'
-- fields) and is not robust becomes the holder outright, with its own
-- lease, and the message tells it so: "h:<token>:<fence>:<died>:<lease>"
-- followed by ":<stamp>", the stamp its details carry (that of its
-- request that wrote them; none from a client before it, whose details
-- have seven fields); it needs no claim.  The head takes it only if the
-- stamp is that of its latest request answered "busy", whose send time
-- it counts the lease from (mutex_lock.c): else it asks again, and finds
-- the lock its own if the hand-over still holds.  Any other head gets state 'handed' ('died' if the
-- releaser died holding it) and the message "h:<token>": it claims the
-- lock with its own acquire, and one that never does is no owner that
-- died (a robust one must learn of a death only from a hold it knew of).
-- Not recoverable is never handed on: every waiter is woken to see it.
--
-- Every read comes before the first write; the RPUSH and PUBLISH, under
-- pcall, cannot fail the script, and its message reaches the waiters only after
-- the script ends (see release.lua).
local VERSION = '2'
local tok = ARGV[1]

-- @include token.lua

local cur, ldied, llease = unpack(redis.call('HMGET', KEYS[1], 'token', 'died', 'lease'))
if cur ~= tok then
	redis.call('ZSCORE', KEYS[4], tok)
	redis.call('HGET', KEYS[2], 'q:' .. tok)
	redis.call('ZREM', KEYS[3], tok)
	redis.call('ZREM', KEYS[4], tok)
	redis.call('HDEL', KEYS[2], 'q:' .. tok)
	redis.call('DEL', ARGV[3] .. ':' .. tok)
	return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local queue = redis.call('ZRANGE', KEYS[3], 0, -1)
local gone = {}
if #queue > 0 then
	gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
end
local mode = ARGV[2]
if mode == '3' then
	if ldied == '1' then
		mode = '2'
	else
		mode = '0'
	end
end
local dead, queued = {}, {}
for _, w in ipairs(gone) do
	dead[w] = true
end
for _, w in ipairs(queue) do
	queued[w] = true
end
local head
if mode ~= '1' then
	for _, w in ipairs(queue) do
		if not dead[w] and w ~= tok then
			head = w
			break
		end
	end
end
local nxt = ARGV[6]
if nxt == '' or mode == '1' or (head and head ~= nxt) then
	nxt = nil
end
local msg = 'r'
-- One read of the meta hash: the token counter, the count of holds, and
-- the head's hold: lease robust host pid tid since hostid.
local counter, n, q = unpack(redis.call('HMGET', KEYS[2], 'fence', 'n', 'q:' .. (head or '')))
local info
-- The lease a lock handed to a head that must claim it starts with: the
-- head's own (it claims with it), else the releasing hold's; the
-- client's default only for a hold that recorded none.  Not the client's
-- first: a mutex's lease may be shorter, and a head that died before its
-- claim would keep the lock from everyone for the longer one.
local hlease = ARGV[5]
if tonumber(llease) and tonumber(llease) > 0 then
	hlease = llease
end
if head and not nxt then
	msg = 'h:' .. head
	if q then
		info = {}
		for f in string.gmatch(q, '%S+') do
			info[#info + 1] = f
		end
		-- Seven fields from a client before the stamp, eight after.
		local ok = #info == 7 or #info == 8
		if ok and tonumber(info[1]) and tonumber(info[1]) > 0 then
			hlease = info[1]
		end
		if not ok or info[2] ~= '0' then
			info = nil
		end
	end
end

-- Out of the queue: the dead, the caller (if it queued meanwhile) and
-- whom the lock goes to.
local function unqueue(w)
	redis.call('ZREM', KEYS[3], w)
	redis.call('ZREM', KEYS[4], w)
	redis.call('HDEL', KEYS[2], 'q:' .. w)
end
for _, w in ipairs(gone) do
	unqueue(w)
end
if queued[tok] and not dead[tok] then
	unqueue(tok)
end
-- A hold written whole below (a thread of ours, or a head that left its
-- details) overwrites every field a fair lock's hash has: no DEL first.
if not (nxt or info) then
	redis.call('DEL', KEYS[1])
end
-- The token and the count of holds go with the meta hash's other fields.
local fence, holds
if nxt or head then
	fence = following(counter, now, tonumber(t[2]) % 1000)
	holds = (tonumber(n) or 0) + 1
end
if nxt then
	local d = 0
	if mode == '2' then
		d = 1
	end
	if queued[nxt] and not dead[nxt] then
		unqueue(nxt)
	end
	redis.call('HSET', KEYS[2], 'v', VERSION, 'state', 'held', 'robust', '0', 'fence', fence,
		'n', holds)
	redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[7]) + tonumber(ARGV[4]))
	redis.call('HSET', KEYS[1], 'v', VERSION, 'token', nxt, 'fence', fence, 'died', d,
		'host', ARGV[8], 'pid', ARGV[9], 'tid', ARGV[10], 'since', tostring(now),
		'lease', ARGV[7], 'hostid', ARGV[11])
	redis.call('PEXPIRE', KEYS[1], ARGV[7])
	return {1, fence, d}
end
if head then
	local d, state = 0, 'handed'
	if mode == '2' then
		d, state = 1, 'died'
	end
	unqueue(head)
	if info then
		local lease = info[1]
		redis.call('HSET', KEYS[2], 'v', VERSION, 'state', 'held', 'robust', '0', 'fence', fence,
			'n', holds)
		redis.call('PEXPIRE', KEYS[2], tonumber(lease) + tonumber(ARGV[4]))
		redis.call('HSET', KEYS[1], 'v', VERSION, 'token', head, 'fence', fence, 'died', d,
			'host', info[3], 'pid', info[4], 'tid', info[5], 'since', tostring(now),
			'lease', lease, 'hostid', info[7])
		redis.call('PEXPIRE', KEYS[1], lease)
		msg = msg .. ':' .. fence .. ':' .. d .. ':' .. lease
		if info[8] then
			msg = msg .. ':' .. info[8]
		end
	else
		redis.call('HSET', KEYS[2], 'v', VERSION, 'state', state, 'fence', fence, 'n', holds)
		redis.call('PEXPIRE', KEYS[2], tonumber(hlease) + tonumber(ARGV[4]))
		redis.call('HSET', KEYS[1], 'v', VERSION, 'token', head, 'fence', fence, 'died', d,
			'since', tostring(now), 'lease', hlease)
		redis.call('PEXPIRE', KEYS[1], hlease)
	end
elseif mode == '0' then
	redis.call('HDEL', KEYS[2], 'state')
	redis.call('PEXPIRE', KEYS[2], ARGV[4])
elseif mode == '1' then
	redis.call('HSET', KEYS[2], 'state', 'notrec')
	redis.call('PERSIST', KEYS[2])
else
	redis.call('HSET', KEYS[2], 'state', 'died')
	redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
-- A waiter's grant list: the message, for a lease and idle_ms at most.
local ttl = tonumber(hlease) + tonumber(ARGV[4])
local function push(w)
	local told = redis.pcall('RPUSH', ARGV[3] .. ':' .. w, msg)
	if type(told) ~= 'table' then
		redis.pcall('PEXPIRE', ARGV[3] .. ':' .. w, ttl)
	end
	return told
end
local told
if head then
	told = push(head)
else
	told = redis.pcall('PUBLISH', ARGV[3], msg)
	for _, w in ipairs(queue) do
		if w ~= tok then
			push(w)
		end
	end
end
if type(told) == 'table' then
	return 2
end
return 1
