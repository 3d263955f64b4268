-- inspect.lua: read the holder, its token, the remaining TTL and the holder
-- metadata together.
--
-- KEYS[1]  the lease hash prefix:{name}:lease
--
-- Replies {} when the lock is free, else {owner, token, pttl, metadata}; the
-- metadata is '' for a lease taken by a version that stored none.
local holder = redis.call('HMGET', KEYS[1], 'owner', 'token', 'metadata')
if not holder[1] then
  return {}
end
return {holder[1], holder[2] or '', redis.call('PTTL', KEYS[1]), holder[3] or ''}
