-- resume.lua: adopt owner's live lease: renew it and read its token, in one
-- step.
--
-- KEYS[1]  the lease hash prefix:{name}:lease
-- ARGV[1]  owner
-- ARGV[2]  lease TTL in milliseconds
--
-- Replies the lease's token, as a decimal string, after renewing the lease
-- to ARGV[2]; the integer 0 when owner does not hold the lock. It never
-- creates a lease and never mints a token; the metadata is kept, as
-- extend.lua keeps it.
local holder = redis.call('HMGET', KEYS[1], 'owner', 'token')
if holder[1] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return holder[2]
end
return 0
