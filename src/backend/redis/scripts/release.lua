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
--
-- Returns 1 released, 0 not ours (another holder's now, or no lock value),
-- 3 not ours either, but no key at all (expired, deleted, or released by
-- an earlier attempt of this release whose answer was lost: Redlock tells
-- them apart, src/backend/redis/redlock.c), 2 released but the waiters could not
-- be told (the ACL denies the channel: they wake at the end of the lease
-- they wait on).
--
-- Publishes only when a waiter marked the lock key (w, acquire.lua): a
-- waiter subscribes before the attempt that marks it, and both scripts are
-- atomic, so a release either sees the mark or comes before the attempt,
-- which then finds the lock free.
--
-- Only a robust hold (flag r) has state in the meta hash to update; a
-- non-robust release is a compare-and-delete.  Nothing may fail after the
-- first write: a script that failed after releasing would make the retry,
-- finding the lock gone, report a clean unlock as lost.  So the meta hash
-- is written first (WRONGTYPE on foreign data fails there, before anything
-- changed) and the PUBLISH runs under pcall.  Its message reaches the
-- waiters only after the script ends, so nobody sees it early.
local val, tok = redis.call('GET', KEYS[1]), ARGV[1]
-- "3 token fence died flags ...": the token compared in place, the rest
-- read from behind it (cheaper than parsing the whole value: this runs
-- at every unlock).
if not val then
	return 3
end
if val:sub(3, 2 + #tok) ~= tok or val:byte(3 + #tok) ~= 32 then
	return 0
end
local died, flags = val:match('^%S+ (%S+) (%S+) ', 4 + #tok)
local mode = ARGV[2]
if mode == '3' then
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
if flags:find('w', 1, true) and type(redis.pcall('PUBLISH', ARGV[3], 'r')) == 'table' then
	return 2
end
return 1
