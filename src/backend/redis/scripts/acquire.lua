-- Take a lock if it is free or already carries our token.
--
-- KEYS[1]  lock key, a string that expires with the lease (README "How it
--          works", layout 3):
--            "3 token fence died flags lease since pid tid hostid host"
--          fence '-' until the hold asks for it (fence.lua); flags '-' or
--          letters: r robust hold, w someone waits (release.lua publishes
--          only then), c the lease is kept for its process
--          (lease_cache.lua), h no hold: reserved for the waiter whose
--          token it carries, which a release just woke (wake_queue.lua).  "3 notrec" (no expiry): not recoverable
--          until an operator resets it.
-- KEYS[2]  meta hash: fence (the last token handed out), state (robust
--          holds only: held, died); expires idle_ms after the lease of the
--          hold that last wrote it
-- ARGV     token, lease_ms, tail ("lease since pid tid hostid host", made
--          by the client: for operators), robust (1/0), keep_ms (lease_ms
--          + idle_ms), wait (1: the caller listens on its own wake channel
--          and waits if the lock is busy: it queues, wake_queue.lua; 0:
--          trylock, or not subscribed yet),
--          step (0: the token at the hold's first dmutex_fence, fence.lua;
--          1: Redlock: a token now, counted on from the counter, see below;
--          2: a token now: Cluster, where fence.lua could meet a slot in
--          migration), wake channel, stamp (the request's own: the
--          client's send time, which a grant echoes, wake_queue.lua;
--          absent from clients before it: they leave no details), pop
--          ('1': the waiter's thread pops its grant from its own list,
--          the wake channel's name with ':' and its token, with BLPOP:
--          its details say so, step + 4, and this request empties that
--          list; absent from clients before it)
--
-- Returns {0, fence, died}  acquired (fence a decimal string, '0' when not
--                           assigned yet; died = 1: the previous robust
--                           hold ended without an unlock)
--         {1, pttl_ms}      held by someone else for at most pttl_ms more
--         {2}               not recoverable until an operator resets it
--         {3, version}      the key was written by another version
--
-- The common case never comes here: a non-robust lock that nobody holds is
-- taken by the client's one `SET lock value NX PX lease GET` (redis.c).
-- This script serves what that command cannot: robust holds (the meta
-- state), Redlock (a token at once), a waiter's mark, a kept lease's
-- recall, and the retry of an attempt whose reply was lost.
--
-- Fencing tokens: token = max(previous + 1, server TIME in ms << 20), so
-- the low 20 bits count holds within one millisecond.  A name whose state
-- expired (or was reset) starts again from the server's clock, above every
-- token it handed out before: tokens stay strictly increasing without
-- keeping every name for ever (as long as the server's clock does not go
-- back).  One server assigns a hold's token while the hold is live (here
-- or in fence.lua), and holds do not overlap, so the order of the tokens
-- is the order of the holds.
--
-- Redlock (step 1): a name with state counts on, last + 1, without the
-- clock.  Each node has its own clock, so with the clock in every token
-- the nodes would almost never agree and every acquisition would need the
-- write-back round (fence_raise.lua, src/backend/redis/redlock.c).  Counting on,
-- nodes that took part in the same holds stay equal, and the write-back
-- runs only after a node missed some.  Tokens still grow across expiry: a
-- counter grows by one a hold, far less than 2^20 a millisecond, so it
-- does not run ahead of the clock (by more than the nodes' clocks differ,
-- when the write-back raised it to another node's value).
--
-- A retry after a lost reply carries the same token: it finds the lock
-- already ours and answers as the first attempt did, so a lost reply never
-- strands a lock and never hands out a second fencing token.
--
-- Every read comes before the first write: a script that fails (WRONGTYPE
-- on foreign data, a command the ACL denies) must not have changed anything.
local tok, lease, robust, keep, step = ARGV[1], ARGV[2], ARGV[4], ARGV[5], ARGV[7]

-- @include token.lua
-- @include layout.lua
-- @include wake_queue.lua

local val = redis.call('GET', KEYS[1])
if val then
	if val == NOTREC then
		return {2}
	end
	local v, cur, fence, died, flags, rest = parse(val)
	if v ~= VERSION then
		if v then
			return {3, v}
		end
		return redis.error_reply('WRONGTYPE lock key holds data dmutex did not write')
	end
	-- Reserved for us by the release that woke us (flag h, wake_queue.lua):
	-- taken as a free lock, by the path below.  Reserved for another: a
	-- hold, as any.
	if not (cur == tok and flags:find('h', 1, true)) then
		if cur == tok then
			redis.call('PEXPIRE', KEYS[1], lease)
			if step ~= '0' then
				-- Redlock: while our first attempt's key sat here, another
				-- holder may have raised this node's counter (fence_raise); a
				-- token handed out now must still be above it.  On one node
				-- the two are always equal.
				local counter = redis.call('HGET', KEYS[2], 'fence')
				if fence == '-' or (counter and above(counter, fence)) then
					fence = fresh_token(KEYS[2], counter, step)
					redis.call('HSET', KEYS[2], 'v', VERSION)
					redis.call('PEXPIRE', KEYS[2], keep)
					redis.call('SET', KEYS[1], value(cur, fence, died, flags, rest), 'KEEPTTL')
				end
			end
			return {0, fence == '-' and '0' or fence, tonumber(died) or 0}
		end
		-- A waiter says so on the key, which ends with this hold: the release
		-- publishes only when someone listens.  A lease kept for its process
		-- (lease_cache.lua) is asked back, by a trylock too, once per hold: its
		-- holder hands it over at its next unlock (after a batch of its own
		-- waiting threads, lease_cache.c), or at once if no thread of it holds
		-- it.  A batch kept while someone waited already hears nothing: its
		-- unlock releases all the same.  Waiters ignore the 'k' they hear on that channel
		-- (waiter.c).
		if not flags:find('w', 1, true) then
			local cached = flags:find('c', 1, true)
			if cached then
				redis.pcall('PUBLISH', ARGV[8], 'k')
			end
			if cached or ARGV[6] == '1' then
				redis.call('SET', KEYS[1], value(cur, fence, died, with_flag(flags, 'w'), rest), 'KEEPTTL')
			end
		end
		-- Queued by arrival (server time, microseconds); asking again keeps
		-- the place.  The queue lives as long as the meta hash would for
		-- the waiter that needs it longest: its TTL only grows (a waiter
		-- with a short lease must not cut a longer one's).  A TTL within
		-- an eighth of keep_ms of it is left as it is (issue 28: one call
		-- less at nearly every queueing, where waiters queue moments
		-- apart): the queue still outlives by far the third of a lease
		-- before this waiter asks again.  Under pcall:
		-- past the first write (a queue that cannot be written wakes its
		-- waiter at its bound, a third of a lease).
		-- A waiter that is neither robust nor Redlock also leaves its
		-- details (wake_queue.lua), so that the release that pops it can
		-- grant it the lock outright; they live as long as the queue.
		if ARGV[6] == '1' then
			local q, t = wake_queue(KEYS[1], KEYS[2]), redis.call('TIME')
			redis.pcall('ZADD', q, 'NX', t[1] * 1000000 + t[2], step == '1' and '!' .. tok or tok)
			local ttl = redis.pcall('PTTL', q)
			if type(ttl) ~= 'number' or ttl < tonumber(keep) - math.floor(tonumber(keep) / 8) then
				redis.pcall('PEXPIRE', q, keep)
				ttl = keep
			end
			if robust == '0' and step ~= '1' and ARGV[9] then
				local d, s = wake_details(KEYS[1], KEYS[2]), step
				-- A waiter that pops its list (ARGV[10]).  Anything left
				-- there answers an earlier request (a grant it did not
				-- take, a wake-up it did not need): not dropped here (a
				-- call at every queueing for what is nearly never there);
				-- the waiter takes a grant only under the stamp rule, and
				-- anything else popped makes it ask once more.
				if ARGV[10] == '1' then
					s = step == '0' and '4' or '6'
				end
				redis.pcall('HSET', d, tok, s .. ' ' .. keep .. ' ' .. ARGV[9] .. ' ' .. ARGV[3])
				redis.pcall('PEXPIRE', d, ttl)
			end
		end
		return {1, redis.call('PTTL', KEYS[1])}
	end
end

-- Free.  A robust lock reads its state: 'held' with no lock key means the
-- last robust holder's lease ran out (crash, stall, partition); 'died' that
-- it exited holding the lock.  Both are owner-died.  A non-robust lock
-- keeps no state (the contract lets it take a dead holder's lock once the
-- lease ended, and say nothing).
local died, fence, flags = '0', '-', '-'
if robust == '1' or step ~= '0' then
	local counter, state = unpack(redis.call('HMGET', KEYS[2], 'fence', 'state'))
	if step ~= '0' then
		fence = fresh_token(KEYS[2], counter, step)
	end
	if robust == '1' then
		if state == 'held' or state == 'died' then
			died = '1'
		end
		flags = 'r'
		redis.call('HSET', KEYS[2], 'v', VERSION, 'state', 'held')
	else
		redis.call('HSET', KEYS[2], 'v', VERSION)
	end
	redis.call('PEXPIRE', KEYS[2], keep)
end
-- A waiter taking it leaves the queue, and marks its hold if others still
-- wait there: its release wakes the next (a lock taken by the plain SET
-- is marked by the next waiter that finds it held).
if ARGV[6] == '1' then
	local q = wake_queue(KEYS[1], KEYS[2])
	redis.pcall('ZREM', q, tok, '!' .. tok)
	if robust == '0' and step ~= '1' then
		redis.pcall('HDEL', wake_details(KEYS[1], KEYS[2]), tok)
	end
	local more = redis.pcall('ZCARD', q)
	if type(more) == 'number' and more > 0 then
		flags = with_flag(flags, 'w')
	end
end
redis.call('SET', KEYS[1], value(tok, fence, died, flags, ARGV[3]), 'PX', lease)
return {0, fence == '-' and '0' or fence, tonumber(died)}
