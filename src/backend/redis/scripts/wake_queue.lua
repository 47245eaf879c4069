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

-- Wake the first live waiter of queue q, whose channels are ch .. ':' ..
-- token: pop and publish until one listens, at most 16 pops (the rest,
-- if all of those were gone, wake at their bound: a third of a lease).
-- Under pcall throughout: a release must not fail after its first write.
-- ZRANGE and ZREM, not ZPOPMIN: the commands of the documented ACL
-- (README "The ACL a Redis user needs"), which users have set up already.
-- Returns false if the ACL denies the channel; else true and the member
-- woken, if one listened.
local function wake_next(q, ch)
	for _ = 1, 16 do
		local head = redis.pcall('ZRANGE', q, 0, 0)
		if type(head) ~= 'table' or head.err or not head[1] then
			return true
		end
		redis.pcall('ZREM', q, head[1])
		local n = redis.pcall('PUBLISH', ch .. ':' .. member_token(head[1]), 'r')
		if type(n) == 'table' then
			return false
		end
		if n > 0 then
			return true, head[1]
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
local function reserve(lk, w, lease)
	if w and w:byte(1) ~= 33 then
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
