-- release_wake.lua: compare-and-delete on the owner, then wake the first
-- waiter in line, if any.
--
-- KEYS[1]  the lease hash prefix:{name}:lease
-- KEYS[2]  the queue      prefix:{name}:queue (see queue.lua)
-- KEYS[3]  the flag       prefix:{name}:queued
-- ARGV[1]  owner
--
-- Replies 1 when released, 0 when owner does not hold the lock. The counter
-- is not touched, so releasing never lowers the next token.
--
-- queue.lua sets the flag while the lock has waiters, so a release with
-- nobody waiting costs what release.lua costs: HGET and DEL. The one DEL
-- removes the lease and the flag together, and its reply, 2 instead of 1,
-- says that someone may wait: only then is the queue read. The first
-- waiter, owner NUL channel, is woken on its own channel with the message
-- "lease key NUL owner".
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  if redis.call('DEL', KEYS[1], KEYS[3]) > 1 then
    local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    local cut = head and string.find(head, '\0', 1, true)
    if cut then
      redis.call('PUBLISH', string.sub(head, cut + 1), KEYS[1] .. '\0' .. string.sub(head, 1, cut - 1))
    end
  end
  return 1
end
return 0
