-- extend.lua: renew the lease if, and only if, owner still holds it.
--
-- KEYS[1]  the lease hash prefix:{name}:lease
-- ARGV[1]  owner
-- ARGV[2]  lease TTL in milliseconds
--
-- Replies 1 when extended, 0 when owner does not hold the lock. It never
-- creates a lease: an expired or released one stays gone.
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
