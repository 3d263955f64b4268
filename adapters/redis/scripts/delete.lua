-- delete.lua: remove the value if the token is not below the key's fence,
-- keeping the fence as a tombstone so an older token can never re-create it.
-- Runs after compare.lua.
--
-- KEYS[1]  the record hash prefix:{key}
-- ARGV[1]  token, 19-digit zero-padded decimal
--
-- Replies 1 after deleting, {'stale', fence} when refused.
local fence = redis.call('HGET', KEYS[1], 'fence')
if fence and fence ~= ARGV[1] and greater(fence, ARGV[1]) then
  return {'stale', fence}
end
redis.call('HDEL', KEYS[1], 'value')
redis.call('HSET', KEYS[1], 'fence', ARGV[1])
return 1
