-- The lock key's layout (version 3), shared by the scripts that read or
-- write a non-fair lock (embedded by src/backend/redis/scripts/embed_lua.py: "-- @include
-- layout.lua", after token.lua; not a script).  acquire.lua describes the
-- fields; src/backend/redis/common.c writes the same value for the client's
-- plain SET, and tools/inspect.c reads it.
local VERSION = '3'
local NOTREC = '3 notrec'

-- version, token, fence, died, flags, rest ("lease since pid tid hostid
-- host"); all nil if val is not a lock value.
local function parse(val)
	return val:match('^(%S+) (%S+) (%S+) (%S+) (%S+) (.*)$')
end
local function value(tok, fence, died, flags, rest)
	return VERSION .. ' ' .. tok .. ' ' .. fence .. ' ' .. died .. ' ' .. flags .. ' ' .. rest
end
-- The fields of the lock value at key, if it is ours (carries token tok):
-- fence, died, flags, rest; nil if the key is gone, another holder's, or
-- not a lock value of this layout.
local function ours(key, tok)
	local val = redis.call('GET', key)
	if not val then
		return nil
	end
	local v, cur, fence, died, flags, rest = parse(val)
	if v ~= VERSION or cur ~= tok then
		return nil
	end
	return fence, died, flags, rest
end
local function with_flag(flags, f)
	if flags == '-' then
		return f
	end
	return flags .. f
end
-- A new token for a live hold, written to the meta hash and returned
-- (token.lua): Redlock (step '1') counts on from the counter.
local function fresh_token(meta_key, counter, step)
	if counter and step == '1' then
		-- HGET, not HINCRBY's reply: Lua numbers lose digits past 2^53.
		redis.call('HINCRBY', meta_key, 'fence', 1)
		return redis.call('HGET', meta_key, 'fence')
	end
	local t = redis.call('TIME')
	return next_token(meta_key, counter, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
		tonumber(t[2]) % 1000)
end
