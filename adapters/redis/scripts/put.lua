-- put.lua: write a value if the token is not below the key's fence.
-- Runs after compare.lua.
--
-- KEYS[1]  the record hash prefix:{key}   fields value, fence
-- ARGV[1]  token, 19-digit zero-padded decimal
-- ARGV[2]  value
--
-- Replies 1 after writing, {'stale', fence} when refused.
local fence = redis.call('HGET', KEYS[1], 'fence')
if fence and fence ~= ARGV[1] and greater(fence, ARGV[1]) then
  return {'stale', fence}
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1
