-- The token format, shared by the scripts that issue fencing tokens (embedded
-- in each by src/backend/redis/scripts/embed_lua.py: "-- @include token.lua"; not a script).
--
-- Tokens are decimal strings without leading zeros, exact past 2^53 (Lua's
-- numbers are not): max(last + 1, server TIME in ms << 20 + its microseconds
-- within the ms << 10).

-- x > y for decimal strings without leading zeros.
local function above(x, y)
	if #x ~= #y then
		return #x > #y
	end
	return x > y
end
-- The clock's floor for a token: ms << 20, plus the microseconds within
-- that millisecond times 1024 (us < 1000, so it stays below (ms + 1) << 20),
-- as an exact decimal string (ms < 2^42: the parts stay exact).  The
-- microseconds keep two grants of the same millisecond apart when the
-- name's counter was lost between them (evicted, flushed): both would
-- otherwise start again from ms << 20, one token handed to two holds.
local function shifted(ms, us)
	local a, b = math.floor(ms / 1000000) * 1048576, (ms % 1000000) * 1048576 + (us or 0) * 1024
	a, b = a + math.floor(b / 1000000), b % 1000000
	if a == 0 then
		return string.format('%d', b)
	end
	return string.format('%d%06d', a, b)
end
-- The next token of a name, written to its meta hash meta_key and returned:
-- above counter (the last one, nil if none) and above the clock now_ms,
-- now_us (the server's TIME: ms, and microseconds within it).
local function next_token(meta_key, counter, now_ms, now_us)
	local floor = shifted(now_ms, now_us)
	if counter and not above(floor, counter) then
		-- HGET, not HINCRBY's reply: Lua numbers lose digits past 2^53.
		redis.call('HINCRBY', meta_key, 'fence', 1)
		return redis.call('HGET', meta_key, 'fence')
	end
	redis.call('HSET', meta_key, 'fence', floor)
	return floor
end
-- x + 1 for a decimal string without leading zeros, exactly.
local function plus_one(x)
	local i = #x
	while i > 0 and string.byte(x, i) == 57 do
		i = i - 1
	end
	if i == 0 then
		return '1' .. string.rep('0', #x)
	end
	return string.sub(x, 1, i - 1) .. string.char(string.byte(x, i) + 1) .. string.rep('0', #x - i)
end
-- The token next_token would hand out, without writing it: for a script
-- that writes it to the meta hash's 'fence' with its other fields, in one
-- command.
local function following(counter, now_ms, now_us)
	local floor = shifted(now_ms, now_us)
	if counter and not above(floor, counter) then
		return plus_one(counter)
	end
	return floor
end
