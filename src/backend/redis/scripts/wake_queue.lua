-- The waiters' queue of a non-fair lock (README "How it works", "Who a
-- release wakes"), shared by the scripts that queue, wake or leave
-- (embedded by embed_lua.py: "-- @include wake_queue.lua"; not a script).
--
-- A waiter that asks with wait = 1 and finds the lock held puts its token
-- in a sorted set, PREFIX wq :{NAME}, scored by arrival (ZADD NX: asking
-- again keeps its place), and listens on a channel of its own, the lock's
-- wake channel followed by ':' and its token.  A release pops the head and
-- publishes "r" there; PUBLISH answers how many listened, so a waiter that
-- is gone (its process died, or it stopped waiting and unsubscribed) is
-- told apart from a live one, dropped, and the next one tried.  One woken
-- process per release, where every waiting process used to hear every
-- release and ask again (P processes woken together re-locked in O(P^2)
-- requests).
--
-- The queue key and both channels are worked out from the lock key and
-- the meta hash (PREFIX lock :{NAME}, PREFIX meta :{NAME}: the kind starts
-- where the two first differ), so that the scripts take no more arguments:
-- unlock.lua runs at every unlock.  The queue is in the name's hash slot.

-- PREFIX and ":{NAME}" of the lock key lk (whose meta hash is mk).
local function name_parts(lk, mk)
	local i = 1
	while lk:byte(i) == mk:byte(i) do
		i = i + 1
	end
	return lk:sub(1, i - 1), lk:sub(i + 4)
end
local function wake_queue(lk, mk)
	local p, n = name_parts(lk, mk)
	return p .. 'wq' .. n
end

-- A queue member is the waiter's token, or '!' and its token for a
-- Redlock waiter (acquire.lua step 1), for which a release reserves
-- nothing (below): each node would reserve for its own head.
local function member_token(w)
	if w:byte(1) == 33 then
		return w:sub(2)
	end
	return w
end

-- A waiter's details, for the release that grants it the lock (below):
-- the hash PREFIX wd :{NAME}, token -> "STEP KEEP STAMP LEASE SINCE PID
-- TID HOSTID HOST" (acquire.lua's step, keep_ms and the stamp of the
-- request that wrote them, then the tail of the hold value it would
-- write).  Written by a queued waiter that is neither
-- robust nor Redlock, at every attempt; it lives as long as the queue.
-- STEP + 4 (4, 6): the waiter's thread pops its grant from its own list
-- (the channel's name: grant, below) instead of hearing it on the
-- channel.  A release of an older version, which knows only 0 and 2,
-- grants such a waiter nothing: it publishes "r" and reserves the lock,
-- and the waiter's wake-up thread, hearing "r", pushes a wake-up into
-- that list (waiter.c); it asks and takes the reserved lock.
local function wake_details(lk, mk)
	local p, n = name_parts(lk, mk)
	return p .. 'wd' .. n
end

-- The grant (issue 28): the lock lk, just released, given by the release
-- itself to the head w it pops, with no round trip of w's: a hold of w's
-- own, written whole (its token, its lease, a fencing token now if it
-- would have taken one at its acquire: Cluster; else '-' as the plain
-- SET leaves it), and the message "g:<fence>:0:<lease>:<stamp>" (fence
-- '0' when not assigned yet) on its channel, which its waiting thread
-- takes as the answer to an acquire it did not need to send
-- (mutex_lock.c).  The stamp is that of the waiter's request whose
-- details this grant read: the waiter takes the grant only if that is its
-- latest request answered "busy", whose send time it counts the lease
-- from.  A grant to an earlier request must not be taken: a later one
-- found the lock busy, so this grant's hold had already ended (the
-- message can reach the waiter after that answer: they come on two
-- connections).
-- Nothing is written unless this master counts a listener for w (the
-- "g?" asked first, below); the grant's own PUBLISH then counts the same
-- (nothing runs between them inside a script), and should it count none
-- the hold is deleted again, in the same script, so nobody ever sees it
-- (a token the counter skipped is no harm: tokens only need to
-- increase).  A write that fails (it cannot
-- after the release's own first write, but foreign data in the meta hash
-- makes HGET fail) grants nothing: w gets "r" and asks.  Returns the
-- PUBLISH's answer (nil: not granted, wake with "r"; 0: nobody heard,
-- nothing written; a table: the channel is denied, nothing written).
-- A waiter whose details say it pops its list (STEP 4 or 6): the grant
-- is pushed there instead of published (RPUSH, the list living keep_ms),
-- and the "g?" that counted it is the answer; its waiting thread, blocked
-- in BLPOP on that list, is woken by Redis itself, with no relay through
-- its process's wake-up thread.  Nothing is published: that thread pushes
-- a wake-up for anything it hears on the channel.
local function grant(lk, mk, ch, w, info, more)
	local step, keep, stamp, lease, rest = info:match('^([0246]) (%d+) (%d+) (%d+) %S+ (.*)$')
	if not step or #lease > 10 or tonumber(lease) > tonumber(keep) then
		return nil
	end
	local pop = step == '4' or step == '6'
	if pop then
		step = step == '4' and '0' or '2'
	end
	-- Asked first, with nothing written: does anyone hear w here?  A
	-- PUBLISH is also copied to the replicas, whose subscribers it
	-- reaches uncounted (a waiter still subscribed on a master demoted
	-- by a failover); so the grant itself is published only when this
	-- master counts a listener, and written only then.  "g?" means
	-- nothing to a waiter (waiter.c): the grant follows at once.  (Not
	-- "p": a semaphore's post, sem_op.lua.)
	local heard = redis.pcall('PUBLISH', ch .. ':' .. w, 'g?')
	if type(heard) == 'table' or heard == 0 then
		return heard
	end
	local t = redis.pcall('TIME')
	if t.err then
		return nil
	end
	local ms, fence = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), '-'
	if step ~= '0' then
		local counter = redis.pcall('HGET', mk, 'fence')
		if type(counter) == 'table' then
			return nil
		end
		fence = following(counter or nil, ms, tonumber(t[2]) % 1000)
		if type(redis.pcall('HSET', mk, 'v', '3', 'fence', fence)) == 'table' then
			return nil
		end
		redis.pcall('PEXPIRE', mk, keep)
	end
	-- Others wait behind w (wake_next's ZRANGE read two): the hold is
	-- marked, so that its release wakes the next.
	local flags = more and 'w' or '-'
	local set = redis.pcall('SET', lk, '3 ' .. w .. ' ' .. fence .. ' 0 ' .. flags .. ' ' .. lease .. ' ' ..
		string.format('%d', ms) .. ' ' .. rest, 'PX', lease)
	if type(set) ~= 'table' or set.err then
		return nil
	end
	local msg = 'g:' .. (fence == '-' and '0' or fence) .. ':0:' .. lease .. ':' .. stamp
	if pop then
		local pushed = redis.pcall('RPUSH', ch .. ':' .. w, msg)
		if type(pushed) ~= 'number' then
			redis.pcall('DEL', lk)
			return nil
		end
		redis.pcall('PEXPIRE', ch .. ':' .. w, keep)
		return heard
	end
	local n = redis.pcall('PUBLISH', ch .. ':' .. w, msg)
	if type(n) == 'table' or n == 0 then
		redis.pcall('DEL', lk)
	end
	return n
end

-- Wake the first live waiter of queue q, whose channels are ch .. ':' ..
-- token: pop and publish until one listens, at most 16 pops (the rest,
-- if all of those were gone, wake at their bound: a third of a lease).
-- With lk and mk (the lock key, free now, and the meta hash), a head that
-- left its details is granted the lock (grant, above); without them (a
-- lock that became not recoverable is nobody's to grant), or for a head
-- without details, the message is "r" and the head asks.
-- Under pcall throughout: a release must not fail after its first write.
-- ZRANGE and ZREM, not ZPOPMIN: the commands of the documented ACL
-- (README "The ACL a Redis user needs"), which users have set up already.
-- The ZRANGE reads two: whether anyone waits behind the head, for the
-- grant's w flag, with no ZCARD (issue 28: a call less a grant).
-- Returns false if the ACL denies the channel; else true and the member
-- woken, if one listened, and whether it was granted the lock.
local function wake_next(q, ch, lk, mk)
	local d = lk and wake_details(lk, mk)
	for _ = 1, 16 do
		local head = redis.pcall('ZRANGE', q, 0, 1)
		if type(head) ~= 'table' or head.err or not head[1] then
			return true
		end
		redis.pcall('ZREM', q, head[1])
		local info, n
		if d and head[1]:byte(1) ~= 33 then
			info = redis.pcall('HGET', d, head[1])
			redis.pcall('HDEL', d, head[1])
			if type(info) == 'string' then
				n = grant(lk, mk, ch, head[1], info, head[2] ~= nil)
			end
		end
		local granted = n ~= nil
		if not granted then
			n = redis.pcall('PUBLISH', ch .. ':' .. member_token(head[1]), 'r')
		end
		if type(n) == 'table' then
			return false
		end
		if n > 0 then
			return true, head[1], granted
		end
	end
	return true
end

-- How long a reservation lasts: a third of the released hold's lease,
-- between 33 ms (the shortest lease's third) and 100 ms: enough for the
-- woken waiter's round trip on a loaded machine.
local function reserve_ms(lease)
	local ms = math.floor((tonumber(lease) or 300) / 3)
	if ms > 100 then
		ms = 100
	elseif ms < 33 then
		ms = 33
	end
	return ms
end

-- The released lock key lk, reserved for the waiter w just woken (not a
-- Redlock one) for reserve_ms(lease), lease the released hold's: a lock
-- value with its token and flags h (reserved: not a hold; acquire.lua
-- takes it as free for that token alone) and w (others may wait).  So a
-- process that did not queue (the releaser asking again at once, with the
-- plain SET NX) does not take the lock from under the waiter it woke, who
-- would otherwise queue again behind it, release after release.  It costs
-- at most reserve_ms when the woken waiter never comes (stopped, or gone
-- since): others that ask meet it as a hold of that length.  The value's
-- lease field is the released hold's lease, not the reservation's length,
-- so that a woken waiter that gives its reservation up (release.lua mode
-- 4) passes on one as long, not a third of it; the fields after are for
-- operators: "lease 0 0 0 - reserved".
local function reserve(lk, w, lease, granted)
	if w and not granted and w:byte(1) ~= 33 then
		lease = tonumber(lease) or 300
		redis.pcall('SET', lk, '3 ' .. w .. ' - 0 hw ' .. lease .. ' 0 0 0 - reserved', 'PX',
			reserve_ms(lease))
	end
end

-- Wake every waiter of queue q (a lock that became not recoverable: each
-- must see it), and empty it.
local function wake_all(q, ch)
	local all = redis.pcall('ZRANGE', q, 0, -1)
	if type(all) ~= 'table' or all.err then
		return true
	end
	redis.pcall('DEL', q)
	for _, w in ipairs(all) do
		if type(redis.pcall('PUBLISH', ch .. ':' .. member_token(w), 'r')) == 'table' then
			return false
		end
	end
	return true
end
