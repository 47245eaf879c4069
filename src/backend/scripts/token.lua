-- The token format, shared by the scripts that issue fencing tokens (embedded
-- in each by tools/embed_lua.py: "-- @include token.lua"; not a script).
--
-- Tokens are decimal strings without leading zeros, exact past 2^53 (Lua's
-- numbers are not): max(last + 1, server TIME in ms << 20).

-- x > y for decimal strings without leading zeros.
local function above(x, y)
	if #x ~= #y then
		return #x > #y
	end
	return x > y
end
-- ms << 20 as an exact decimal string (ms < 2^42: the parts stay exact).
local function shifted(ms)
	local a, b = math.floor(ms / 1000000) * 1048576, (ms % 1000000) * 1048576
	a, b = a + math.floor(b / 1000000), b % 1000000
	if a == 0 then
		return string.format('%d', b)
	end
	return string.format('%d%06d', a, b)
end
