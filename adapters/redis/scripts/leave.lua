-- leave.lua: give up a waiter's place in a lock's queue.
--
-- KEYS[1]  the queue      prefix:{name}:queue (see queue.lua)
-- KEYS[2]  the places     prefix:{name}:places
-- KEYS[3]  the lease hash prefix:{name}:lease
-- ARGV[1]  owner
-- ARGV[2]  the wake-up channel prefix:{name}:wake
--
-- When the waiter was first in line and the lock is free, the next waiter
-- is woken, so it need not wait for its own renewal. Replies 1.
local head = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if head == ARGV[1] and redis.call('EXISTS', KEYS[3]) == 0 then
  local next = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
  if next then
    redis.call('PUBLISH', ARGV[2], next)
  end
end
return 1
