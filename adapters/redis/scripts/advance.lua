-- advance.lua: raise the key's fence to the token without touching the value.
-- Runs after compare.lua.
--
-- KEYS[1]  the record hash prefix:{key}
-- ARGV[1]  token, 19-digit zero-padded decimal
--
-- Replies 1 after raising (or when already equal), {'stale', fence} when
-- refused.
local fence = redis.call('HGET', KEYS[1], 'fence')
if fence and fence ~= ARGV[1] and greater(fence, ARGV[1]) then
  return {'stale', fence}
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1])
return 1
