-- Waking waiters, shared by cond_signal.lua and cond_refresh.lua (embedded
-- in each by src/backend/redis/scripts/embed_lua.py: "-- @include cond_wake.lua"; not a script).
--
-- A wake-up goes to the oldest live waiters: those whose channel (prefix ..
-- token) has a subscriber.  A waiter that was killed has none (Redis
-- dropped its connection), so it cannot swallow the wake-up: the next one
-- gets it.  One that froze, or whose host died, still looks subscribed;
-- that is why the woken waiter must acknowledge (cond_leave.lua) by its
-- deadline, or its wake-up is owed to another waiter.

-- Publish 's' to the waiters of `live` in order until `want` were reached.
-- Returns the woken, how many of `live` were tried, and whether `me` was.
local function wake_oldest(live, want, prefix, me)
	local woken, tried, mine = {}, 0, false
	for _, w in ipairs(live) do
		if #woken >= want then
			break
		end
		tried = tried + 1
		mine = mine or w == me
		if redis.call('PUBLISH', prefix .. w, 's') > 0 then
			woken[#woken + 1] = w
		end
	end
	return woken, tried, mine
end

-- The registrations of waiters zset wk, oldest first: the live ones'
-- tokens (expiry after now), and how many have expired.  One read of the
-- whole set, as ZRANGEBYSCORE of the live ones was: it tells whether
-- there is anything to prune.
local function live_waiters(wk, now)
	local all = redis.call('ZRANGE', wk, 0, -1, 'WITHSCORES')
	local live, stale = {}, 0
	for i = 1, #all, 2 do
		if tonumber(all[i + 1]) > now then
			live[#live + 1] = all[i]
		else
			stale = stale + 1
		end
	end
	return live, stale
end

-- Members given to one ZREM or ZADD at most: Lua's unpack has a stack limit.
local CHUNK = 256

-- The writes that follow (after every read and PUBLISH): expired
-- registrations and wake-ups dropped, the tried waiters taken off the
-- waiters zset wk, and the woken ones owe an acknowledgement in zset sk
-- by `ack` (server ms, a string).  stale and owed: how many expired
-- registrations and wake-ups the caller counted (nil: not counted), each
-- pruned only if there are some.
local function record_woken(wk, sk, now, live, tried, woken, ack, ack_ms, stale, owed)
	if stale == nil or stale > 0 then
		redis.call('ZREMRANGEBYSCORE', wk, '-inf', now)
	end
	if owed == nil or owed > 0 then
		redis.call('ZREMRANGEBYSCORE', sk, '-inf', now)
	end
	for i = 1, tried, CHUNK do
		redis.call('ZREM', wk, unpack(live, i, math.min(tried, i + CHUNK - 1)))
	end
	for i = 1, #woken, CHUNK do
		local args = {}
		for j = i, math.min(#woken, i + CHUNK - 1) do
			args[#args + 1] = ack
			args[#args + 1] = woken[j]
		end
		redis.call('ZADD', sk, unpack(args))
	end
	if #woken > 0 then
		-- Kept past its last deadline: an expired entry is what tells that a
		-- wake-up is owed.  Every live waiter refreshes within its
		-- registration (3 ack periods), so two registrations later each has
		-- seen it, or is gone; then the key goes (issue 16 item 3: no state
		-- kept for a day).
		local last = redis.call('ZRANGE', sk, -1, -1, 'WITHSCORES')
		redis.call('PEXPIREAT', sk, string.format('%.0f', tonumber(last[2]) + 6 * ack_ms))
	end
end
