-- leave.lua: give up a waiter's place in a lock's queue.
--
-- KEYS[1]  the queue      prefix:{name}:queue (see queue.lua)
-- KEYS[2]  the places     prefix:{name}:places
-- KEYS[3]  the lease hash prefix:{name}:lease
-- ARGV[1]  the waiter: owner NUL its wake-up channel
--
-- When the waiter was first in line and the lock is free, the next waiter
-- is woken on its own channel ("lease key NUL owner"), so it need not wait
-- for its own renewal. Replies 1.
local head = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if head == ARGV[1] and redis.call('EXISTS', KEYS[3]) == 0 then
  local next = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
  local cut = next and string.find(next, '\0', 1, true)
  if cut then
    redis.call('PUBLISH', string.sub(next, cut + 1), KEYS[3] .. '\0' .. string.sub(next, 1, cut - 1))
  end
end
return 1
