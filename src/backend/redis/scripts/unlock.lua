-- A clean unlock: release.lua's mode 0, with the fewest arguments, since it
-- runs at every unlock and Redis builds KEYS and ARGV for each call (about
-- 1,300 instructions an argument, counted by callgrind).
--
-- KEYS[1]  lock key, KEYS[2] meta hash (acquire.lua)
-- ARGV[1]  token
--
-- Returns as release.lua: 1 released, 0 not ours, 3 no key at all, 2
-- released but the waiters could not be told.  The wake channel is the lock key's name
-- with "wake" for "lock" (src/backend/redis/keys.h: PREFIX lock :{NAME}, and the
-- meta hash PREFIX meta :{NAME}, so the kind begins where the two keys
-- first differ), worked out only when someone waits.  Why the mark and
-- the order of writes make this safe: release.lua.
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
	local lk, mk, i = KEYS[1], KEYS[2], 1
	while lk:byte(i) == mk:byte(i) do
		i = i + 1
	end
	local ch = lk:sub(1, i - 1) .. 'wake' .. lk:sub(i + 4)
	if type(redis.pcall('PUBLISH', ch, 'r')) == 'table' then
		return 2
	end
end
return 1
