-- A clean unlock: release.lua's mode 0, with the fewest arguments, since it
-- runs at every unlock and Redis builds KEYS and ARGV for each call (about
-- 1,300 instructions an argument, counted by callgrind).
--
-- KEYS[1]  lock key, KEYS[2] meta hash (acquire.lua)
-- ARGV[1]  token
--
-- Returns as release.lua: 1 released, 0 not ours, 3 no key at all, 2
-- released but the waiters could not be told.  The queue and the wake
-- channel are worked out from the keys only when someone waits
-- (wake_queue.lua).  Why the mark and the order of writes make this safe:
-- release.lua.
local val, tok = redis.call('GET', KEYS[1]), ARGV[1]
if not val then
	return 3
end
if val:sub(3, 2 + #tok) ~= tok or val:byte(3 + #tok) ~= 32 then
	return 0
end
local flags = val:match('^%S+ %S+ (%S+) ', 4 + #tok)
if flags == '-' then
	redis.call('DEL', KEYS[1])
	return 1
end
if flags:find('r', 1, true) then
	redis.call('HDEL', KEYS[2], 'state')
end
redis.call('DEL', KEYS[1])
if flags:find('w', 1, true) then

-- @include token.lua
-- @include wake_queue.lua

	local p, n = name_parts(KEYS[1], KEYS[2])
	local ch = p .. 'wake' .. n
	local told, woken, granted = wake_next(p .. 'wq' .. n, ch, KEYS[1], KEYS[2])
	reserve(KEYS[1], woken, val:match('^%S+ %S+ %S+ (%S+)', 4 + #tok), granted)
	-- The lock's own channel too: a waiter of an older version listens
	-- there (README "Upgrading"); nobody else does, and a PUBLISH that no
	-- one hears costs little.
	if not told or type(redis.pcall('PUBLISH', ch, 'r')) == 'table' then
		return 2
	end
end
return 1
