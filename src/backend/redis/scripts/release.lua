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

-- @include token.lua
-- @include wake_queue.lua

local mode = ARGV[2]
-- "3 token fence died flags ...": the token compared in place, the rest
-- read from behind it (cheaper than parsing the whole value: this runs
-- at every unlock).
if not val or val:sub(3, 2 + #tok) ~= tok or val:byte(3 + #tok) ~= 32 then
	if mode == '4' then
		local q = wake_queue(KEYS[1], KEYS[2])
		redis.pcall('ZREM', q, tok, '!' .. tok)
		-- Its grant list (wake_queue.lua), if it popped one: nobody reads
		-- it any more.
		redis.pcall('DEL', ARGV[3] .. ':' .. tok)
		redis.pcall('HDEL', wake_details(KEYS[1], KEYS[2]), tok)
		local more = redis.pcall('ZCARD', q)
		if type(more) == 'number' and more > 0 then
			local flags = val and val:match('^3 %S+ %S+ %S+ (%S+) ')
			if not val then
				local _, woken, granted = wake_next(q, ARGV[3], KEYS[1], KEYS[2])
				reserve(KEYS[1], woken, nil, granted)
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
if ARGV[2] == '4' then
	redis.pcall('DEL', ARGV[3] .. ':' .. tok)
end
if flags:find('w', 1, true) then
	local q = wake_queue(KEYS[1], KEYS[2])
	local told, woken, granted
	if mode == '1' then
		told = wake_all(q, ARGV[3])
		redis.pcall('DEL', wake_details(KEYS[1], KEYS[2]))
	else
		told, woken, granted = wake_next(q, ARGV[3], KEYS[1], KEYS[2])
		reserve(KEYS[1], woken, val:match('^%S+ %S+ %S+ %S+ %S+ (%S+)'), granted)
	end
	-- And the lock's own channel, for waiters of an older version (as
	-- unlock.lua).
	if not told or type(redis.pcall('PUBLISH', ARGV[3], 'r')) == 'table' then
		return 2
	end
end
return 1
