-- permit_extend.lua: renew owner's permit, only while it is live. Runs
-- after permit_lib.lua (KEYS there).
--
-- ARGV[1]  owner
-- ARGV[2]  permit TTL in milliseconds
--
-- Replies 1 when extended, 0 when owner holds no live permit: an expired
-- or released permit is never re-created.
local e = redis.call('ZSCORE', KEYS[3], ARGV[1])
if not e or tonumber(e) <= now then
  return 0
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[3], now + ttl, ARGV[1])
keep(ttl, KEYS[3], KEYS[2])
return 1
