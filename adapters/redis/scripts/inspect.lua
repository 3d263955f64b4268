-- inspect.lua: read the holder, its token and the remaining TTL together.
--
-- KEYS[1]  the lease hash prefix:{name}:lease
--
-- Replies {} when the lock is free, else {owner, token, pttl}.
local holder = redis.call('HMGET', KEYS[1], 'owner', 'token')
if not holder[1] then
  return {}
end
return {holder[1], holder[2] or '', redis.call('PTTL', KEYS[1])}
