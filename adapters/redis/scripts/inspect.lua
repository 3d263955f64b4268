-- inspect.lua: read the holder, its token, the remaining TTL, the holder
-- metadata and the number of live places in the lock's line together,
-- without writing.
--
-- KEYS[1]  the lease hash prefix:{name}:lease
-- KEYS[2]  the places     prefix:{name}:places (see queue.lua): waiter -> place expiry, server ms
--
-- Replies {waiting} when the lock is free, else {waiting, owner, token,
-- pttl, metadata}; waiting counts the places whose expiry has not passed on
-- the server's clock (expired ones stay until an acquire drops them), and
-- the metadata is '' for a lease taken by a version that stored none. With
-- nobody waiting, the line costs one ZCARD of the missing set.
local waiting = redis.call('ZCARD', KEYS[2])
if waiting > 0 then
  local t = redis.call('TIME')
  waiting = redis.call('ZCOUNT', KEYS[2], '(' .. (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)), '+inf')
end
local holder = redis.call('HMGET', KEYS[1], 'owner', 'token', 'metadata')
if not holder[1] then
  return {waiting}
end
return {waiting, holder[1], holder[2] or '', redis.call('PTTL', KEYS[1]), holder[3] or ''}
