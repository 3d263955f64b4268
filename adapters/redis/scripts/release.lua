-- release.lua: compare-and-delete on the owner.
--
-- KEYS[1]  the lease hash prefix:{name}:lease
-- ARGV[1]  owner
--
-- Replies 1 when released, 0 when owner does not hold the lock. The counter is
-- not touched, so releasing never lowers the next token.
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
