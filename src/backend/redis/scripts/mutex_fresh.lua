-- A mutex that no process uses any more (the shim's users.c): what the
-- last ones left goes, an owner-died or a not-recoverable state, unless a
-- hold is live (a program not through the shim may have it).
--
-- KEYS[1]  lock key (acquire.lua): expires with its hold's lease;
--          "3 notrec" (no expiry) not recoverable
-- KEYS[2]  meta hash (acquire.lua): the robust state (held, died) and the
--          last fencing token, which the next starts above anyway (from
--          the server's clock)
-- ARGV[1]  wake channel: a waiter (not through the shim) looks again
--
-- Returns 1 dropped, 0 nothing there, -1 held.  A key reserved for a
-- woken waiter (flag h, wake_queue.lua) is no hold but answers -1 too: the
-- waiter is about to take the lock, and nothing is dropped under it.
local v = redis.call('GET', KEYS[1])
if v and v ~= '3 notrec' then
	return -1
end
if not v and redis.call('EXISTS', KEYS[2]) == 0 then
	return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PUBLISH', ARGV[1], 'r')
return 1
