-- acquire.lua: take a lock and mint its token, or extend the caller's own lease.
--
-- KEYS[1]  the lease hash   prefix:{name}:lease    fields owner, token, metadata
-- KEYS[2]  the counter      prefix:{name}:counter  the last token minted
-- ARGV[1]  owner
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  counter idle expiry in milliseconds; 0 or less: never expires
-- ARGV[4]  holder metadata (any bytes; stored as given, "" for none)
--
-- Replies {'new', token} after minting, {'mine', token} when the owner already
-- held the lock (extended, same token), {'held', pttl} when someone else holds
-- it. Tokens are returned as decimal strings. Taking or extending the lease
-- stores ARGV[4] as its metadata, replacing the owner's earlier one.
--
-- The token is next = max(counter + 1, server TIME in microseconds), so it
-- stays above every earlier token even after the counter is lost (a restart
-- without persistence, a failover to a replica that missed the last write,
-- the counter's idle expiry), as long as the server clock does not step back.
-- TIME is built into a decimal string and the counter advances with INCR
-- (exact 64-bit integer arithmetic inside Redis), so no token ever passes
-- through a Lua double.

-- Redis 3.2 to 4 replicate scripts verbatim unless told to replicate their
-- effects, and refuse writes after TIME; from 5 on this is the default.
if redis.replicate_commands then
  pcall(redis.replicate_commands)
end

local holder = redis.call('HMGET', KEYS[1], 'owner', 'token')
if holder[1] then
  if holder[1] == ARGV[1] then
    redis.call('HSET', KEYS[1], 'metadata', ARGV[4])
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {'mine', holder[2]}
  end
  return {'held', redis.call('PTTL', KEYS[1])}
end

local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', tonumber(t[2]))
local last = redis.call('GET', KEYS[2])
local expires = tonumber(ARGV[3]) > 0
local token
if last and not greater(now, last) then
  -- The counter is at or ahead of the clock: count on from it.
  redis.call('INCR', KEYS[2])
  token = redis.call('GET', KEYS[2])
  if expires then
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  else
    redis.call('PERSIST', KEYS[2])
  end
elseif expires then
  -- The clock is ahead (or the counter is gone): jump to it.
  redis.call('SET', KEYS[2], now, 'PX', ARGV[3])
  token = now
else
  redis.call('SET', KEYS[2], now)
  token = now
end

-- No owner field means no lease hash at all: HSET creates it afresh.
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, 'metadata', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {'new', token}
