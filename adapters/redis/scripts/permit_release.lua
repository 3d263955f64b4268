-- permit_release.lua: compare-and-delete of owner's permit, then wake the
-- waiters it lets in. Runs after permit_lib.lua (KEYS there).
--
-- ARGV[1]  owner
--
-- Replies 1 when released, 0 when owner holds no live permit. The counter
-- is not touched, so releasing never lowers the next token. With nobody in
-- line the line is not read: one EXISTS of the missing places.
local e = redis.call('ZSCORE', KEYS[3], ARGV[1])
if not e or tonumber(e) <= now then
  return 0
end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[5]) == 1 then
  purge()
  letIn()
end
return 1
