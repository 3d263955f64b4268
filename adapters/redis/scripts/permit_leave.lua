-- permit_leave.lua: give up owner's place in line, and wake the waiters
-- that this lets in (a writer at the head that leaves lets the readers
-- behind it in). Runs after permit_lib.lua (KEYS there).
--
-- ARGV[1]  owner
--
-- Replies 1.
if redis.call('ZREM', KEYS[6], ARGV[1]) == 1 then
  redis.call('ZREM', KEYS[5], ARGV[1])
  redis.call('ZREM', KEYS[7], ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
  purge()
  letIn()
end
return 1
