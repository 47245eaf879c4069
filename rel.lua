-- Release a lock we hold, and wake the waiters if there are any.
--
-- KEYS[1]  lock key, KEYS[2] meta hash (acquire.lua)
-- ARGV     token, mode, wake channel, idle_ms (how long the meta hash
--          outlives an owner-died hold, see acquire.lua)
--          mode 0: clean unlock
--          mode 1: unlocked after EOWNERDEAD without dmutex_consistent:
--                  the lock becomes not recoverable
--          mode 2: the holder exited or lost its lease: owner died
--          mode 3: abandon an acquire whose reply was lost: put the robust
--                  state back as the acquire found it
--          mode 4: the same, by a waiter that leaves the waiters' queue
--                  without the lock (a timed lock's deadline, an error):
--                  the pass-on, below (not Redlock's roll-back of a
--                  minority: that waiter waits on, queued)
--
-- Returns 1 released, 0 not ours (another holder's now, or no lock value),
-- 3 not ours either, but no key at all (expired, deleted, or released by
-- an earlier attempt of this release whose answer was lost: Redlock tells
-- them apart, src/backend/redis/redlock.c), 2 released but the waiters could not
-- be told (the ACL denies the channel: they wake at the end of the lease
-- they wait on).
--
-- Wakes only when a waiter marked the lock key (w, acquire.lua): a
-- waiter subscribes before the attempt that marks it and queues it, and
-- both scripts are atomic, so a release either sees the mark and the
-- queue or comes before the attempt, which then finds the lock free.  It
-- wakes the first live waiter of the queue (wake_queue.lua); a lock that
-- becomes not recoverable wakes them all.
--
-- The pass-on (mode 4, the lock not ours): a waiter that queued and leaves
-- without the lock takes its token out of the queue, and if the lock is
-- free wakes the next live waiter, or if it is held makes sure the hold is
-- marked, so that its release wakes one.  The waiter cannot know whether
-- a release popped it and published to it (it counted as live: it still
-- listened), so it always sends this.  Both scripts are atomic: a release
-- either ran before (the pass-on finds the lock free, or held by a newer
-- hold, and wakes or marks) or after (it does not find the leaver in the
-- queue, and wakes the next live one itself).  No wake-up is lost.
--
-- Only a robust hold (flag r) has state in the meta hash to update; a
-- non-robust release is a compare-and-delete.  Nothing may fail after the
-- first write: a script that failed after releasing would make the retry,
-- finding the lock gone, report a clean unlock as lost.  So the meta hash
-- is written first (WRONGTYPE on foreign data fails there, before anything
-- changed) and the PUBLISH runs under pcall.  Its message reaches the
-- waiters only after the script ends, so nobody sees it early.
local val, tok = redis.call('GET', KEYS[1]), ARGV[1]

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

-- The released lock key lk, reserved for the waiter w just woken (not a
-- Redlock one) for reserve_ms: a lock value with its token and flags h
-- (reserved: not a hold; acquire.lua takes it as free for that token
-- alone) and w (others may wait).  So a process that did not queue (the
-- releaser asking again at once, with the plain SET NX) does not take the
-- lock from under the waiter it woke, who would otherwise queue again
-- behind it, release after release.  It costs at most reserve_ms when the
-- woken waiter never comes (stopped, or gone since): others that ask meet
-- it as a hold of that length.  The fields after the flags are for
-- operators: "reserve_ms 0 0 0 - reserved".
local function reserve(lk, w, reserve_ms)
	if w and w:byte(1) ~= 33 then
		redis.pcall('SET', lk, '3 ' .. w .. ' - 0 hw ' .. reserve_ms .. ' 0 0 0 - reserved', 'PX', reserve_ms)
	end
end
-- How long: a third of the released hold's lease, between 33 ms (the
-- shortest lease's third) and 100 ms: enough for the woken waiter's round
-- trip on a loaded machine.
local function reserve_ms(lease)
	local ms = math.floor((tonumber(lease) or 300) / 3)
	if ms > 100 then
		ms = 100
	elseif ms < 33 then
		ms = 33
	end
	return ms
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


local mode = ARGV[2]
-- "3 token fence died flags ...": the token compared in place, the rest
-- read from behind it (cheaper than parsing the whole value: this runs
-- at every unlock).
if not val or val:sub(3, 2 + #tok) ~= tok or val:byte(3 + #tok) ~= 32 then
	if mode == '4' then
		local q = wake_queue(KEYS[1], KEYS[2])
		redis.pcall('ZREM', q, tok, '!' .. tok)
		local more = redis.pcall('ZCARD', q)
		if type(more) == 'number' and more > 0 then
			local flags = val and val:match('^3 %S+ %S+ %S+ (%S+) ')
			if not val then
				local _, woken = wake_next(q, ARGV[3])
				reserve(KEYS[1], woken, reserve_ms(nil))
			elseif val == '3 notrec' then
				wake_next(q, ARGV[3])
			elseif flags and not flags:find('w', 1, true) then
				-- A kept lease is asked back as acquire.lua does when it
				-- marks w: later waiters find w set and ask nothing, and
				-- its process hears only this.
				if flags:find('c', 1, true) then
					redis.pcall('PUBLISH', ARGV[3], 'k')
				end
				local head, rest = val:match('^(3 %S+ %S+ %S+ )%S+( .*)$')
				redis.call('SET', KEYS[1], head .. (flags == '-' and 'w' or flags .. 'w') .. rest,
					'KEEPTTL')
			end
		end
	end
	if not val then
		return 3
	end
	return 0
end
local died, flags = val:match('^%S+ (%S+) (%S+) ', 4 + #tok)
if mode == '3' or mode == '4' then
	if died == '1' then
		mode = '2'
	else
		mode = '0'
	end
end
local robust = flags:find('r', 1, true)
if mode == '1' then
	-- Not recoverable until an operator says so: a value every locker
	-- meets, with no expiry (SET without PX drops the lease's).
	if robust then
		redis.call('HDEL', KEYS[2], 'state')
	end
	redis.call('SET', KEYS[1], '3 notrec')
else
	if robust and mode == '0' then
		-- No PEXPIRE: the meta hash already lives idle_ms past the end
		-- of the lease this hold was granted or renewed, and the hold
		-- ends before that.
		redis.call('HDEL', KEYS[2], 'state')
	elseif robust then
		-- Owner died: told to the next robust locker within idle_ms.
		redis.call('HSET', KEYS[2], 'state', 'died')
		redis.call('PEXPIRE', KEYS[2], ARGV[4])
	end
	redis.call('DEL', KEYS[1])
end
if flags:find('w', 1, true) then
	local q = wake_queue(KEYS[1], KEYS[2])
	local told, woken
	if mode == '1' then
		told = wake_all(q, ARGV[3])
	else
		told, woken = wake_next(q, ARGV[3])
		reserve(KEYS[1], woken, reserve_ms(val:match('^%S+ %S+ %S+ %S+ %S+ (%S+)')))
	end
	-- And the lock's own channel, for waiters of an older version (as
	-- unlock.lua).
	if not told or type(redis.pcall('PUBLISH', ARGV[3], 'r')) == 'table' then
		return 2
	end
end
return 1

